"""Shared fixtures: named people (owner, member, outsider) so every permission test checks
the outsider too, and an API client with a bearer token."""

import json
import os

import pytest
from django.test import Client

from chats.models import ChatMember
from chats.services import api_token_create, chat_get_or_create, chat_member_ensure
from tests import database_template


def pytest_report_header(config):
    from django.conf import settings
    from django.db import connection

    return [
        f"database: {connection.vendor} ({settings.DATABASES['default']['NAME']})",
        f"redis: {settings.REDIS_URL}",
        f"metrics: {settings.PROMETHEUS_MULTIPROC_DIR}",
    ]


def pytest_sessionstart(session):
    """In CI the production services must be there: fail loudly instead of skipping."""
    if not os.environ.get("CI"):
        return
    from django.conf import settings

    missing = []
    if os.environ.get("HERMES_REQUIRE_POSTGRES") and settings.DATABASES["default"]["ENGINE"] != (
        "django.db.backends.postgresql"
    ):
        missing.append("DATABASE_URL must point at PostgreSQL in this run")
    import redis

    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        missing.append(f"Redis at {settings.REDIS_URL} is unreachable: {exc}")
    if missing:
        pytest.exit("CI needs its services: " + "; ".join(missing), returncode=3)


@pytest.fixture(scope="session", autouse=True)
def _own_redis_namespace():
    """This run's keys, groups and queue in Redis are its own: parallel runs (and leftovers
    of earlier ones, whose database ids repeat) never see each other's events or flags."""
    from django.conf import settings

    from hermes_site.celery import app

    prefix = f"hermes-test-{os.getpid()}"
    os.environ["REDIS_KEY_PREFIX"] = prefix  # for the workers and servers tests start
    settings.REDIS_KEY_PREFIX = prefix
    settings.CACHES["default"]["KEY_PREFIX"] = prefix
    from django.core.cache import caches

    # A cache made before this fixture (an import, collection) keeps the prefix it was made
    # with: it would share keys with every other run and worker on this Redis.
    for made in caches.all(initialized_only=True):
        made.key_prefix = prefix
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = prefix
    app.conf.task_default_queue = prefix
    yield
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
        for key in client.scan_iter(f"*{prefix}*", count=1000):
            client.delete(key)
    except redis.RedisError:
        pass


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Real hashing costs seconds per user on these machines; tests need no strength."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def make_person(django_user_model):
    def make(username: str, **extra):
        return django_user_model.objects.create_user(
            username=username, password=f"pw-{username}-123!", **extra
        )

    return make


@pytest.fixture
def owner(make_person):
    return make_person("olivia")


@pytest.fixture
def member(make_person):
    return make_person("marco")


@pytest.fixture
def outsider(make_person):
    return make_person("oscar")


@pytest.fixture
def team_chat(owner, member):
    """A web room owned by `owner` with `member` in it; `outsider` is not."""
    chat, _ = chat_get_or_create(channel="web", chat_id="team-room", title="Team room")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    return chat


class ApiClient:
    """A test client that sends a bearer token and JSON bodies."""

    def __init__(self, raw_token: str | None):
        self.client = Client()
        self.raw_token = raw_token

    def _headers(self, extra):
        headers = dict(extra or {})
        if self.raw_token is not None:
            headers.setdefault("Authorization", f"Bearer {self.raw_token}")
        return headers

    def get(self, path, params=None, headers=None):
        return self.client.get(path, params or {}, headers=self._headers(headers))

    def post(self, path, payload=None, *, body=None, content_type="application/json", headers=None):
        data = body if body is not None else json.dumps(payload)
        return self.client.post(
            path, data=data, content_type=content_type, headers=self._headers(headers)
        )

    def generic(self, method, path, body=b"", headers=None):
        return self.client.generic(method, path, body, headers=self._headers(headers))


@pytest.fixture
def api_for():
    def make(person):
        _, raw = api_token_create(person=person, name="tests")
        return ApiClient(raw)

    return make


@pytest.fixture(autouse=True)
def _fresh_redis_state():
    """Each test starts with no events, flags or groups of earlier tests (database ids repeat
    across tests), and with the circuit breaker closed."""
    from django.conf import settings

    from hermes_site import redis as hub_redis

    hub_redis._breaker.down_until = 0.0
    yield
    hub_redis._breaker.down_until = 0.0
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
        keys = list(client.scan_iter(f"{settings.REDIS_KEY_PREFIX}:*", count=1000))
        # Tasks a test enqueued with no worker to run them (the queue is named by the
        # prefix): a later test's worker must not run them against its own rows.
        keys.append(settings.REDIS_KEY_PREFIX)
        if keys:
            client.delete(*keys)
    except redis.RedisError:
        pass


@pytest.fixture(autouse=True)
def _fresh_ingest_caches():
    """Cached Chat/Actor rows must not outlive the test database rows they point at."""
    from chats.services import clear_ingest_caches

    clear_ingest_caches()
    yield
    clear_ingest_caches()


@pytest.fixture
def fake_llm(settings):
    """A fake OpenAI-compatible server on loopback, with the LLM_* settings pointing at it."""
    from tests.fakes.openai_server import FakeOpenAI

    with FakeOpenAI() as server:
        server.configure(settings)
        yield server


@pytest.fixture
def live_stack(transactional_db, fake_llm, settings):
    """daphne + a Celery worker as subprocesses on the test database, Redis and fake model."""
    from django.conf import global_settings

    from tests.live import START_BOUND_SECONDS, LiveStack

    # The subprocesses use the real password hashers: people made here must log in there.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS

    stack = LiveStack(llm_base_url=fake_llm.base_url, worker_name=f"e2e-{os.getpid()}@%h")
    try:
        # Both start at once; the test begins when both are ready.
        stack.start_worker(wait=False)
        stack.start_web()
        stack.wait_for_log("worker", "ready", START_BOUND_SECONDS)
        yield stack
    finally:
        stack.stop()


def pytest_configure(config):
    database_template.controller_configure(config)
    database_template.cheaper_postgresql_flush()


def pytest_unconfigure(config):
    database_template.controller_cleanup(config)


@pytest.fixture(scope="session")
def django_db_setup(
    request,
    django_test_environment,
    django_db_blocker,
    django_db_use_migrations,
    django_db_keepdb,
    django_db_createdb,
    django_db_modify_db_settings,
):
    """pytest-django's test databases, migrated once per parallel run: the first worker
    migrates and keeps a template, the others clone it (tests/database_template.py)."""
    from django.test.utils import setup_databases, teardown_databases
    from pytest_django.fixtures import _disable_migrations, _get_databases_for_setup

    if not django_db_use_migrations:
        _disable_migrations()
    keepdb = django_db_keepdb and not django_db_createdb
    aliases, serialized_aliases = _get_databases_for_setup(request.session.items)
    verbosity = request.config.option.verbose

    def setup(**extra):
        return setup_databases(
            verbosity=verbosity,
            interactive=False,
            aliases=aliases,
            serialized_aliases=serialized_aliases,
            **extra,
        )

    name = None if keepdb else database_template.template_name()
    with django_db_blocker.unblock():
        if name is None:
            db_cfg = setup(keepdb=keepdb)
        else:
            with database_template.template_lock(name):
                cloned = database_template.template_ready(name)
                if cloned:
                    database_template.template_clone(name)
                else:
                    db_cfg = setup()
                    try:
                        database_template.template_save(name)
                    except Exception as exc:  # the next worker migrates for itself
                        request.node.warn(pytest.PytestWarning(f"test database template: {exc!r}"))
            if cloned:
                db_cfg = setup(keepdb=True)  # every migration is there: none runs
    yield
    if not keepdb:
        with django_db_blocker.unblock():
            try:
                teardown_databases(db_cfg, verbosity=verbosity)
            except Exception as exc:
                request.node.warn(pytest.PytestWarning(f"test database teardown: {exc!r}"))


def pytest_collection_modifyitems(config, items):
    """Files marked `heavy` (minutes each) first: the parallel run hands out whole files in
    collection order, so a heavy file collected last would leave one worker busy long after
    the others finished. The order is the same in every worker, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)


@pytest.fixture
def files_processed_inline(monkeypatch):
    """What a worker on the files' queue would do, done where the test runs: a stored file
    that a processor wants is processed (text extraction in its child process) as soon as
    its transaction commits, instead of waiting in a queue no worker reads in unit tests."""
    from attachments.processing import PROCESS_TASK
    from attachments.services import attachment_process

    def send_task(name, args=(), **kwargs):
        assert name == PROCESS_TASK, name
        attachment_process(*args)

    monkeypatch.setattr("attachments.services.current_app.send_task", send_task)
