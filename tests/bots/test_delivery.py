"""Bot API calls of the bridge against the fake Bot API server (real HTTP): link previews are
off unless TELEGRAM_LINK_PREVIEWS turns them on, so a URL in a reply is never fetched by
Telegram without somebody clicking it."""

import pytest
from asgiref.sync import async_to_sync

from bots.bridge import build_bot
from bots.delivery import ChatGate, Sender
from tests.fakes.telegram_server import private_chat, tg_user

ALICE = tg_user(1001, "Alice")
URL_TEXT = "See https://attacker.example/track?who=alice for details"


def sender() -> Sender:
    return Sender(build_bot(), ChatGate())


def send_and_edit(tg) -> tuple[dict, dict]:
    tg.message(private_chat(ALICE), ALICE, "hi")  # Telegram knows the chat

    async def calls():
        out = sender()
        async with out.bot:
            message_id = await out.send(chat_id=1001, thread_id=None, html=URL_TEXT, plain=URL_TEXT)
            await out.edit(
                chat_id=1001, message_id=message_id, html=URL_TEXT + "!", plain=URL_TEXT + "!"
            )

    async_to_sync(calls)()
    [sent] = tg.calls_of("sendMessage")
    [edited] = tg.calls_of("editMessageText")
    return sent.params, edited.params


def test_messages_and_edits_go_out_with_link_previews_off(fake_telegram):
    sent, edited = send_and_edit(fake_telegram)
    assert sent["link_preview_options"] == {"is_disabled": True}
    assert edited["link_preview_options"] == {"is_disabled": True}


def test_link_previews_can_be_turned_on(fake_telegram, settings):
    settings.TELEGRAM_LINK_PREVIEWS = True
    sent, edited = send_and_edit(fake_telegram)
    assert "link_preview_options" not in sent and "link_preview_options" not in edited


pytestmark = pytest.mark.timeout(60)
