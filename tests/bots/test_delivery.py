"""Bot API calls of the bridge against the fake Bot API server (real HTTP): link previews are
off unless TELEGRAM_LINK_PREVIEWS turns them on, so a URL in a reply is never fetched by
Telegram without somebody clicking it. A reply whose turn waits for a decision shows no
typing while it waits."""

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


@pytest.mark.django_db(transaction=True)
def test_a_turn_waiting_for_a_decision_shows_no_typing_and_its_reply_comes_once():
    import asyncio

    from bots.delivery import ReplyDelivery
    from bots.models import OutboundMessage
    from chats.agent import events
    from chats.models import Turn
    from chats.services import chat_get_or_create, message_ingest

    chat, _ = chat_get_or_create(channel="telegram", chat_id="1001", kind="dm")
    trigger = message_ingest(
        channel="telegram", chat_id="1001", user_id=1001, user_name="Alice", text="deploy"
    ).message
    turn = Turn.objects.create(chat=chat, trigger=trigger, status=Turn.Status.WAITING)
    row = OutboundMessage.objects.create(kind="reply", turn=turn, chat=chat, telegram_chat_id=1001)
    events.publish(chat.pk, "turn.started", turn_id=turn.pk)
    waited = events.publish(chat.pk, "turn.waiting", turn_id=turn.pk, name="probe__append_line")
    # What the bot hears once a decider approved and the turn ran to its end.
    finished = {
        "type": "turn.finished",
        "turn_id": turn.pk,
        "seq": waited["seq"] + 1,
        "message": {"text": "Deployed."},
    }

    class Recorder:
        gate = ChatGate()

        def __init__(self):
            self.typing, self.sent = [], []

        async def typing(self, **kwargs):
            self.typing.append(kwargs)

        async def send(self, **kwargs):
            self.sent.append(kwargs["plain"])
            return 77

    async def deliver(recorder):
        queue = asyncio.Queue()
        queue.put_nowait(finished)
        await ReplyDelivery(recorder, row, queue).run()

    recorder = Recorder()
    async_to_sync(deliver)(recorder)
    assert recorder.typing == []  # it waited: nobody is writing
    assert recorder.sent == ["Deployed."]  # and the answer came once
    row.refresh_from_db()
    assert (row.status, row.message_ids) == ("delivered", [77])


pytestmark = pytest.mark.timeout(60)
