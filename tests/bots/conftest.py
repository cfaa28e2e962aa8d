"""Fixtures of the Telegram bridge tests: the fake Bot API server, and the whole product
live (Celery worker + the bot process + fake model + fake Telegram)."""

import json
import os
from dataclasses import dataclass

import pytest

from bots.updates import BotIdentity
from tests.bots.live_bot import BotProcess
from tests.fakes.telegram_server import FakeTelegram

ALLOWED_USERS = [1001, 1002, 1003, *range(2001, 2013)]
GROUP_ID = -1001000000001
FORUM_ID = -1001000000002
BOT = BotIdentity(7654321, "hermes_test_bot")  # the bot the in-process tests speak to


def process(update):
    """Run one update through the bridge's processing service, as the bot would."""
    from bots.services import telegram_update_process

    return telegram_update_process(update, identity=BOT)


@pytest.fixture
def tg():
    return FakeTelegram()  # not started: only its update builders are used


@pytest.fixture
def fake_telegram(settings):
    """A fake Bot API server on loopback; the settings point the bridge at it."""
    with FakeTelegram() as tg:
        tg.configure(settings)
        settings.TELEGRAM_ALLOWED_USERS = [str(u) for u in ALLOWED_USERS]
        settings.TELEGRAM_ALLOWED_CHATS = [str(GROUP_ID), str(FORUM_ID)]
        yield tg


@dataclass
class TelegramLive:
    tg: FakeTelegram
    bot: BotProcess
    stack: object
    llm: object


@pytest.fixture
def telegram_live(transactional_db, fake_llm, fake_telegram, settings, tmp_path):
    """A Celery worker and `manage.py run_telegram_bot` against the fakes, on the test DB."""
    from django.conf import global_settings

    from tests.live import LiveStack

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    # Files the worker fetches go to a folder of this test's own, which the test reads too.
    blobs = {"location": str(tmp_path / "attachment-blobs")}
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {"BACKEND": settings.ATTACHMENTS_STORAGE, "OPTIONS": blobs},
    }
    env = {
        "ATTACHMENTS_STORAGE_OPTIONS": json.dumps(blobs),
        **fake_telegram.env(),
        "TELEGRAM_ALLOWED_USERS": ",".join(settings.TELEGRAM_ALLOWED_USERS),
        "TELEGRAM_ALLOWED_CHATS": ",".join(settings.TELEGRAM_ALLOWED_CHATS),
        "TELEGRAM_POLL_TIMEOUT_SECONDS": "1",
        "TELEGRAM_EDIT_INTERVAL_SECONDS": "1.0",
    }
    stack = LiveStack(
        llm_base_url=fake_llm.base_url, worker_name=f"tg-{os.getpid()}@%h", extra_env=env
    )
    bot = BotProcess(stack, fake_telegram)
    try:
        # The files' queue too: photos and documents are fetched there (attachments.telegram).
        stack.start_worker()
        bot.start()
        yield TelegramLive(fake_telegram, bot, stack, fake_llm)
    finally:
        bot.stop()
        stack.stop()
