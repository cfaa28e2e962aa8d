"""provider_info(): pages describe the model without building it. For an OpenAI-compatible
server the answer is the provider's own, and a process that only shows pages never imports
the `openai` SDK (about 40 MiB of the web process)."""

import subprocess
import sys

from chats.agent.llm import OpenAICompatProvider, provider_info, reset_provider_cache
from tests import database_template
from tests.live import BASE_DIR


def test_the_settings_answer_is_the_providers_own(settings):
    settings.LLM_PROVIDER = "auto"
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1/"
    settings.LLM_MODEL = "gpt-4o-mini"
    settings.LLM_CONTEXT_TOKENS = 64000
    reset_provider_cache()
    try:
        before = provider_info()
        assert before == OpenAICompatProvider.from_settings().info
        assert before.extra["base_url"] == "http://127.0.0.1:9/v1"
    finally:
        reset_provider_cache()


SHOW_A_CHAT_PAGE = """
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "hermes_site.settings"
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
from django.contrib.auth import get_user_model
from chats.services import chat_get_or_create, chat_member_ensure
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
print("openai" in sys.modules)
"""


def test_a_chat_page_does_not_import_the_sdk(tmp_path):
    # A migrated database of its own (a copy made once per run): this process writes to it.
    database = database_template.migrated_sqlite_copy(tmp_path / "db.sqlite3")
    env = {
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": "x",
        "DATABASE_URL": f"sqlite:///{database}",
        "REDIS_URL": "redis://127.0.0.1:6379/15",
        "LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "LLM_MODEL": "gpt-4o-mini",
        "HERMES_VAR_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", SHOW_A_CHAT_PAGE],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
