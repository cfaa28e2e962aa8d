"""Voice notes, audio files, video notes and videos on Telegram, after they are stored
(`attachments.telegram` fetches and stores them like documents; a processor transcribes
them, `attachments.processing`). Three things the bridge cannot know by itself:

- **"typing…" while a transcript is made**: a chat action source (`bots.chat_actions`)
  answers the Telegram chats with an audio or video file still `pending` (or a voice note
  whose turn is held while it is downloaded), for a person who waits for the bot (a private
  chat, or a group message addressed to the bot), for at most
  TELEGRAM_TRANSCRIBING_ACTION_SECONDS after the file arrived.
- **A failed transcript is told**: when such a file settles `failed`, a notice says why and
  that the audio is kept (the bridge sends notices to Telegram); only where the person waits
  for the bot, so a group is not told about voice notes that were never for the bot.
- **A group voice note is addressed by its words** (not a video: a clip's sound is seldom
  the sender speaking to the group; its caption decides): whether it asks the bot is decided
  after its transcript, by the rule text follows (a reply to the bot was seen on arrival;
  the transcript naming the bot, by its username said aloud, counts like a mention). It
  runs on `attachment_settled`, after the update's transaction and after the transcript's.
  A transcript is never read as a command: it only ever decides whether to answer.
"""

import logging
import re
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from attachments.models import Attachment
from bots.chat_actions import PendingAction
from chats.models import Channel, ChatKind, Message, Turn, TurnHold
from chats.notices import chat_notice_post

logger = logging.getLogger(__name__)

# Telegram media types whose file is heard, and the attachment kinds a transcript is made of.
HEARD = ("voice", "audio", "video_note", "video")
# Those whose words decide, in a group, whether the bot was addressed: what a person says to
# the group. A video's sound track is usually someone else's (a clip): its caption decides.
SPOKEN_TO = ("voice", "audio", "video_note")
HEARD_KINDS = (Attachment.Kind.AUDIO, Attachment.Kind.VIDEO)
NOTICE_KIND = "transcript_failed"
ACTION = "typing"  # the bot will answer in text: "typing…", not "recording a voice message…"
_WHAT = {
    "voice": "Your voice message",
    "video_note": "Your video message",
    "audio": "The audio",
    "video": "The sound of your video",
}
_KEPT = {"video": "The video is kept"}


def _telegram_meta(message: Message) -> dict:
    return (message.metadata or {}).get("telegram") or {}


def _heard(attachment: Attachment) -> dict | None:
    """The Telegram metadata of a heard file's message (a voice note, audio, a video note
    sent on Telegram); None for anything else."""
    if attachment.kind not in HEARD_KINDS or not attachment.received:
        return None
    meta = _telegram_meta(attachment.message)
    if (meta.get("attachment") or {}).get("type") not in HEARD:
        return None
    if not isinstance(meta.get("chat_id"), int):
        return None
    return meta


def _waits_for_bot(message: Message, meta: dict) -> bool:
    return message.chat.kind == ChatKind.DM or bool(meta.get("addressed"))


# --- "typing…" while pending --------------------------------------------------------------


def transcribing_chat_actions() -> list[PendingAction]:
    """The chat action source: Telegram chats with a heard file still being transcribed for a
    person who waits for the bot (bounded in number and in time)."""
    since = timezone.now() - timedelta(seconds=settings.TELEGRAM_TRANSCRIBING_ACTION_SECONDS)
    pending = (
        Attachment.objects.filter(
            state=Attachment.State.PENDING,
            kind__in=HEARD_KINDS,
            created_at__gte=since,
            message__chat__channel=Channel.TELEGRAM,
        )
        .select_related("message__chat")
        .order_by("-id")[:100]
    )
    actions = []
    for attachment in pending:
        meta = _heard(attachment)
        if meta is None or not _waits_for_bot(attachment.message, meta):
            continue
        actions.append(PendingAction(meta["chat_id"], meta.get("thread_id"), ACTION))
    # Before the file is stored (its download from the Bot API): the message's turn is held
    # for it and wanted.
    held = (
        TurnHold.objects.filter(
            state=TurnHold.State.HELD,
            respond=True,
            created_at__gte=since,
            chat__channel=Channel.TELEGRAM,
        )
        .select_related("message")
        .order_by("-id")[:100]
    )
    for hold in held:
        meta = _telegram_meta(hold.message)
        if (meta.get("attachment") or {}).get("type") in HEARD and isinstance(
            meta.get("chat_id"), int
        ):
            actions.append(PendingAction(meta["chat_id"], meta.get("thread_id"), ACTION))
    return actions


# --- once the transcript is made (or not) -------------------------------------------------


def on_heard_file_settled(sender=None, attachment: Attachment | None = None, **kwargs) -> None:
    """Receiver of `attachment_settled` for Telegram's heard files: tell a failure, and in a
    group decide from the transcript whether the bot was addressed. Never raises: the
    receivers after it (the turn's release) must run whatever happens here."""
    if attachment is None:
        return
    try:
        _heard_file_settled(attachment)
    except Exception:  # noqa: BLE001 - a notice or a decision lost is logged, the turn goes on
        logger.exception("after the transcript of attachment %s", attachment.pk)


def _heard_file_settled(attachment: Attachment) -> None:
    attachment = Attachment.objects.select_related("message__chat").filter(pk=attachment.pk).first()
    if attachment is None:
        return
    meta = _heard(attachment)
    if meta is None:
        return
    message = attachment.message
    if attachment.state == Attachment.State.FAILED:
        if _waits_for_bot(message, meta):
            _failure_tell(attachment, meta)
        return
    if (
        attachment.state == Attachment.State.READY
        and (meta.get("attachment") or {}).get("type") in SPOKEN_TO
        and message.chat.kind != ChatKind.DM
        and not meta.get("addressed")
        and names_bot(attachment.extracted_text)
    ):
        voice_note_addressed(message_id=message.pk)


def _failure_tell(attachment: Attachment, meta: dict) -> None:
    media_type = (meta.get("attachment") or {}).get("type")
    what = _WHAT.get(media_type, "The audio")
    kept = _KEPT.get(media_type, "The audio is kept")
    reason = attachment.failure or "The transcription failed."
    chat_notice_post(
        chat=attachment.message.chat,
        text=(
            f"{what} could not be transcribed: {reason} {kept}; send it again or write the message."
        ),
        kind=NOTICE_KIND,
        detail={"about_message": attachment.message_id, "attachment": attachment.pk},
    )


def _squash(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.lower())


def names_bot(transcript: str, *, username: str | None = None) -> bool:
    """Whether a transcript names the bot: its username said aloud ("hermes test bot",
    "Hermes-Test-Bot", "@hermes_test_bot"), or the username without its "bot" ending
    ("hermes test"), as whole words. Never a substring of a longer word."""
    if username is None:
        from bots.services import bot_identity  # loads python-telegram-bot: only here

        username = bot_identity().username
    wanted = _squash(username or "")
    if not wanted or not transcript:
        return False
    names = {wanted}
    if wanted.endswith("bot") and len(wanted) > 5:
        names.add(wanted[: -len("bot")])
    words = [_squash(word) for word in re.findall(r"[\w@]+", transcript[:20000])]
    words = [word for word in words if word]
    longest = max(len(name) for name in names)
    for start in range(len(words)):
        joined = ""
        for word in words[start:]:
            joined += word
            if joined in names:
                return True
            if len(joined) >= longest:
                break
    return False


def voice_note_addressed(*, message_id: int) -> Turn | None:
    """A group's voice note named the bot: it wants an answer, as a mention would. Its held
    turn will be requested when released; a hold released already (its deadline passed
    while the transcript was made) gets its turn now, and its streamed reply. Once."""
    with transaction.atomic():
        message = Message.objects.select_for_update().select_related("chat").get(pk=message_id)
        meta = _telegram_meta(message)
        if meta.get("addressed"):
            return None
        metadata = dict(message.metadata or {})
        metadata["telegram"] = {**meta, "addressed": True, "addressed_by": "transcript"}
        Message.objects.filter(pk=message.pk).update(metadata=metadata)
        message.metadata = metadata
        hold = TurnHold.objects.select_for_update().filter(message_id=message_id).first()
        if hold is not None and hold.state == TurnHold.State.HELD:
            TurnHold.objects.filter(pk=hold.pk).update(respond=True)
            turn = None
        elif Turn.objects.filter(trigger_id=message_id).exists():
            return None
        else:
            turn = _answer_now(message, hold)
    if turn is None:
        from attachments.waiting import files_hold_release_if_settled

        return files_hold_release_if_settled(message_id)
    return turn


def _answer_now(message: Message, hold: TurnHold | None) -> Turn:
    from bots.services import reply_for_held_turn  # loads python-telegram-bot: only here
    from chats.agent.turns import turn_request

    turn = turn_request(message=message)
    if hold is not None:
        TurnHold.objects.filter(pk=hold.pk).update(turn=turn)
    reply_for_held_turn(turn=turn)
    return turn
