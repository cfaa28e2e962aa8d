"""`manage.py run_telegram_bot` refuses to run without what it needs; `make run` starts it
only when a token is configured."""

import pytest
from django.core.management import CommandError, call_command

from hermes_site.runner import processes


def test_make_run_starts_the_bridge_only_with_a_token():
    env = {"PORT": "8000", "REDIS_URL": "redis://127.0.0.1:6379/0"}
    assert "telegram" not in processes(env)
    with_token = processes({**env, "TELEGRAM_BOT_TOKEN": "123:abc"})
    assert with_token["telegram"][-2:] == ["manage.py", "run_telegram_bot"]


def test_the_command_needs_a_token(settings):
    settings.TELEGRAM_BOT_TOKEN = ""
    with pytest.raises(CommandError, match="TELEGRAM_BOT_TOKEN"):
        call_command("run_telegram_bot")


def test_webhook_mode_needs_its_url_and_secret(settings):
    settings.TELEGRAM_BOT_TOKEN = "123:abc"
    settings.TELEGRAM_WEBHOOK_URL = ""
    with pytest.raises(CommandError, match="TELEGRAM_WEBHOOK_URL"):
        call_command("run_telegram_bot", mode="webhook")
