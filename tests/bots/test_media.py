"""Photos, documents and albums sent on Telegram, through the fake Bot API server (getFile
and real file downloads over HTTP): each file is stored once on its own message, the turn
waits for it, an album gets one turn, and a file that cannot be had is told to the chat."""

from datetime import timedelta

import pytest
from django.utils import timezone

from attachments.models import Attachment
from attachments.telegram import telegram_file_fetch
from bots.models import OutboundMessage
from chats.agent.holds import turn_holds_release_due
from chats.models import Channel, Chat, Message, Turn, TurnHold
from chats.services import actor_get_or_create, actor_link
from tests.attachments.conftest import png_bytes
from tests.bots.conftest import GROUP_ID, process
from tests.fakes.telegram_server import group_chat, private_chat, tg_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("files_processed_inline"),
]

ALICE = tg_user(1001, "Alice", username="alice")
BOB = tg_user(1002, "Bob")
MENTION = "@hermes_test_bot"


@pytest.fixture(autouse=True)
def _blobs_and_fetches(settings, tmp_path, monkeypatch):
    """Blobs in a folder of the test's own; the files' task runs at once, in-process."""
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "blobs")},
        },
    }
    monkeypatch.setattr(
        "attachments.telegram.fetch_telegram_file.delay", lambda pk: telegram_file_fetch(pk)
    )


def _quiet_period_passes():
    """The album's timers fire (as Celery would, TELEGRAM_MEDIA_GROUP_QUIET_SECONDS later)."""
    past = timezone.now() - timedelta(milliseconds=1)
    TurnHold.objects.filter(state=TurnHold.State.HELD, not_before__gt=past).update(not_before=past)
    return turn_holds_release_due()


def _notices(chat: Chat) -> list[str]:
    return list(
        chat.messages.filter(metadata__notice="attachment_not_received").values_list(
            "text", flat=True
        )
    )


def test_a_photo_with_a_caption_is_one_attachment_of_its_largest_size_and_one_turn(
    fake_telegram,
):
    large = png_bytes(64, 48)
    update = fake_telegram.photo(
        private_chat(ALICE), ALICE, large, small=png_bytes(2, 2), caption="Is this wired right?"
    )
    outcome = process(update)

    message = Message.objects.get()
    assert message.text == "Is this wired right?"  # the caption is the text
    attachment = Attachment.objects.get()
    assert attachment.message_id == message.pk and attachment.kind == "image"
    assert attachment.media_type == "image/png"  # sniffed: Telegram said nothing, the name .jpg
    assert attachment.size == len(large) and attachment.state == Attachment.State.READY
    assert attachment.blob.file.read() == large
    assert fake_telegram.downloads == ["photos/file_2.jpg"]  # the largest size only
    # The file was in place before the turn was requested: one turn, one streamed reply.
    turn = Turn.objects.get()
    assert outcome.result == "held" and turn.trigger_id == message.pk
    reply = OutboundMessage.objects.get(kind=OutboundMessage.Kind.REPLY)
    assert reply.turn_id == turn.pk and reply.telegram_chat_id == ALICE["id"]
    assert reply.reply_to_message_id is None  # a private chat: no quoting


def test_a_redelivered_update_stores_nothing_twice(fake_telegram):
    update = fake_telegram.photo(private_chat(ALICE), ALICE, png_bytes(), caption="once")
    process(update)
    assert process(update).result == "duplicate"
    assert Message.objects.count() == 1 and Attachment.objects.count() == 1
    assert len(fake_telegram.downloads) == 1
    assert Turn.objects.count() == 1 and OutboundMessage.objects.count() == 1
    # The files' task delivered twice (a worker lost its acknowledgement) fetches nothing.
    telegram_file_fetch(Message.objects.get().pk)
    assert len(fake_telegram.downloads) == 1 and Turn.objects.count() == 1


def test_an_album_is_stored_item_by_item_and_answered_once(fake_telegram):
    group = group_chat(GROUP_ID, "Ops")
    album = "album-1"
    updates = [
        fake_telegram.photo(
            group,
            ALICE,
            png_bytes(3, 3),
            caption=f"{MENTION} which is wrong?",
            media_group_id=album,
        ),
        fake_telegram.photo(group, ALICE, png_bytes(4, 4), media_group_id=album),
        fake_telegram.document(
            group, ALICE, b"rack 4: port 12 -> 13\n", "wiring.txt", media_group_id=album
        ),
    ]
    outcomes = [process(update) for update in updates]

    assert [o.result for o in outcomes] == ["held", "held", "held"]
    messages = list(Message.objects.order_by("id"))
    assert [m.text for m in messages] == [
        f"{MENTION} which is wrong?",
        "[photo]",
        "[document wiring.txt]",
    ]
    assert [(a.message_id, a.name) for a in Attachment.objects.order_by("id")] == [
        (messages[0].pk, f"photo_{updates[0]['message']['message_id']}.jpg"),
        (messages[1].pk, f"photo_{updates[1]['message']['message_id']}.jpg"),
        (messages[2].pk, "wiring.txt"),
    ]
    assert not Turn.objects.exists()  # every file is in, but the album may still grow

    assert _quiet_period_passes() == 1
    turn = Turn.objects.get()
    assert turn.trigger_id == messages[-1].pk  # the others are in its history
    reply = OutboundMessage.objects.get(kind=OutboundMessage.Kind.REPLY)
    assert reply.turn_id == turn.pk and reply.telegram_chat_id == GROUP_ID
    assert reply.reply_to_message_id == updates[-1]["message"]["message_id"]
    assert _quiet_period_passes() == 0 and Turn.objects.count() == 1


def test_an_album_nobody_addressed_the_bot_with_gets_no_turn(fake_telegram):
    group = group_chat(GROUP_ID, "Ops")
    for size in (2, 3):
        process(fake_telegram.photo(group, BOB, png_bytes(size, size), media_group_id="a2"))
    assert _quiet_period_passes() == 0
    assert Attachment.objects.count() == 2 and not Turn.objects.exists()
    assert not OutboundMessage.objects.exists()


def test_a_document_over_the_bot_apis_20_mb_is_told_in_the_chat_and_the_message_kept(
    fake_telegram,
):
    update = fake_telegram.document(
        private_chat(ALICE),
        ALICE,
        None,
        "dump.tar",
        size=25 * 1024 * 1024,
        caption="can you look at this dump?",
    )
    process(update)

    message = Message.objects.get(role="user")
    assert message.text == "can you look at this dump?"
    assert fake_telegram.downloads == []
    # Recorded on the message, without bytes: every reader (and the model) sees it missing.
    missing = Attachment.objects.get()
    assert (missing.message_id, missing.name, missing.blob, missing.size) == (
        message.pk,
        "dump.tar",
        None,
        25 * 1024 * 1024,
    )
    assert missing.state == Attachment.State.FAILED and not missing.received
    assert missing.failure == (
        "Could not be fetched from Telegram: it is 25.0 MB, and Telegram lets a bot download "
        "files of at most 20 MB."
    )
    [notice] = _notices(message.chat)
    assert "dump.tar is 25.0 MB" in notice and "at most 20 MB" in notice
    assert "kept without it" in notice
    sent = OutboundMessage.objects.get(kind=OutboundMessage.Kind.SEND)
    assert sent.telegram_chat_id == ALICE["id"] and "20 MB" in sent.payload["text"]
    # The person still gets an answer to their words, told the file did not come.
    assert Turn.objects.filter(trigger=message).count() == 1


def test_a_file_over_the_hubs_limit_is_refused_with_the_reason_and_the_message_kept(
    fake_telegram, settings
):
    settings.ATTACHMENTS_MAX_FILE_BYTES = 1000
    process(fake_telegram.document(private_chat(ALICE), ALICE, b"x" * 1500, "big.log"))
    message = Message.objects.get(role="user")
    assert message.text == "[document big.log]"
    missing = Attachment.objects.get()
    assert missing.blob is None and missing.state == Attachment.State.FAILED
    assert missing.failure.startswith("Not fetched from Telegram: it is 1500 bytes")
    [notice] = _notices(message.chat)
    assert "big.log" in notice and "at most" in notice
    assert Turn.objects.filter(trigger=message).count() == 1


def test_a_download_that_fails_is_told_and_the_turn_goes_on(fake_telegram):
    fake_telegram.fail_next("getFile", status=500, description="Internal Server Error")
    process(fake_telegram.photo(private_chat(ALICE), ALICE, png_bytes(), caption="see"))
    message = Message.objects.get(role="user")
    [notice] = _notices(message.chat)
    assert "could not be downloaded" in notice
    missing = Attachment.objects.get()
    assert missing.kind == "image" and missing.blob is None
    assert missing.declared_type == "image/jpeg"
    assert missing.failure == (
        "Could not be fetched from Telegram: Telegram did not say where the file is "
        "(Internal Server Error)."
    )
    assert Turn.objects.filter(trigger=message).count() == 1


def test_a_telegram_file_lands_only_in_its_chat(fake_telegram, owner, member, outsider, api_for):
    """Only readers of the Telegram chat download it: the group's linked member, not a member
    of another chat nor an outsider (both get 404, as for a file that does not exist)."""
    actor = actor_get_or_create(channel=Channel.TELEGRAM, user_id=ALICE["id"], display_name="A")
    actor_link(actor=actor, person=owner)  # Alice linked her Telegram account
    group = group_chat(GROUP_ID, "Ops")
    data = png_bytes(5, 5)
    process(fake_telegram.photo(group, ALICE, data, caption="the rack"))
    attachment = Attachment.objects.get()
    assert attachment.message.chat.chat_key == f"telegram:{GROUP_ID}"

    path = f"/api/v1/attachments/{attachment.pk}"
    allowed = api_for(owner).get(path)
    assert allowed.status_code == 200 and b"".join(allowed.streaming_content) == data
    assert api_for(member).get(path).status_code == 404  # a member of another chat
    assert api_for(outsider).get(path).status_code == 404


def test_stickers_stay_a_label_and_are_answered_at_once(fake_telegram):
    sticker = {
        "file_id": "s",
        "file_unique_id": "s",
        "width": 1,
        "height": 1,
        "is_animated": False,
        "is_video": False,
        "type": "regular",
        "emoji": "👍",
    }
    outcome = process(
        fake_telegram.message(private_chat(ALICE), ALICE, None, extra={"sticker": sticker})
    )
    assert outcome.message.text == "[sticker 👍]" and outcome.turn is not None
    assert not Attachment.objects.exists() and fake_telegram.downloads == []


# A kind of media no app takes (voice notes are attachments' now): a location.
LOCATION = {"location": {"latitude": 48.8566, "longitude": 2.3522}}


def test_another_app_plugs_in_a_handler_beside_the_files_one(fake_telegram):
    """A second handler (places, say) registers on its own: the photo one is untouched, and
    its message's caption rule and hold apply to what it takes."""
    from bots.media import register_media_handler, unregister_media_handler
    from chats.agent.holds import turn_hold_place

    taken = []

    def take(item):
        taken.append(item.message.pk)
        turn_hold_place(message=item.message, reason="place", deadline_seconds=60, respond=True)
        return True

    register_media_handler("test-place", takes=lambda m: m.get("type") == "location", take=take)
    try:
        outcome = process(fake_telegram.message(private_chat(ALICE), ALICE, None, extra=LOCATION))
        photo = process(fake_telegram.photo(private_chat(ALICE), ALICE, png_bytes(), caption="p"))
    finally:
        unregister_media_handler("test-place")
    assert taken == [outcome.message.pk] and outcome.result == "held"
    assert outcome.message.text == "[location 48.85660, 2.35220]"  # the label
    assert Attachment.objects.get().message_id == photo.message.pk


def test_a_failing_media_handler_loses_nothing(fake_telegram):
    from bots.media import register_media_handler, unregister_media_handler

    def broken(item):
        raise RuntimeError("boom")

    register_media_handler("test-broken", takes=lambda m: m.get("type") == "location", take=broken)
    try:
        outcome = process(fake_telegram.message(private_chat(ALICE), ALICE, None, extra=LOCATION))
    finally:
        unregister_media_handler("test-broken")
    assert outcome.result == "answering" and outcome.turn is not None
    assert Message.objects.get().text == "[location 48.85660, 2.35220]"
