"""Reading Telegram updates: where a message belongs, what it says, whether it asks the bot.

Pure functions over python-telegram-bot objects; no database, no network.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from chats.models import ChatKind

if TYPE_CHECKING:  # python-telegram-bot loads only where Telegram is spoken (the bridge)
    from telegram import Message as TgMessage
    from telegram import MessageEntity, Update, User

# The update types the bridge asks for (and understands).
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]


class BadUpdate(ValueError):
    """An update that is not valid Telegram JSON (the message says why)."""


@dataclass(frozen=True)
class BotIdentity:
    bot_id: int
    username: str = ""


@dataclass(frozen=True)
class Place:
    """Where a message lives: the Telegram chat, its forum topic, and the hub's chat kind."""

    telegram_chat_id: int
    thread_id: int | None
    kind: str
    title: str

    @property
    def is_private(self) -> bool:
        return self.kind == ChatKind.DM


@dataclass(frozen=True)
class Content:
    """What a message says, as the model reads it, plus the attachment it carries."""

    text: str
    attachment: dict | None = None
    caption: str = ""
    label: str = ""  # "[photo]", "[document report.pdf]": what the text says of the media

    def text_with_file(self) -> str:
        """The text when an app takes the file itself (`bots.media`): the caption, or the
        label for a file sent without one."""
        return self.caption or self.label


@dataclass(frozen=True)
class Command:
    name: str
    args: str


def parse_update(data: object) -> Update:
    """A python-telegram-bot Update from the JSON object Telegram sent."""
    if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
        raise BadUpdate("an update is a JSON object with an integer update_id")
    try:
        from telegram import Update

        return Update.de_json(data, None)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadUpdate(f"not a valid Telegram update: {exc}") from exc


def update_kind(update: Update) -> str:
    """Which of the understood update types this is ("other" for the rest)."""
    for kind in ALLOWED_UPDATES:
        if getattr(update, kind, None) is not None:
            return kind
    return "other"


def ordering_key(update: Update) -> int:
    """Updates with the same key must be applied in order (one chat, or one presser)."""
    chat = update.effective_chat
    if chat is not None:
        return chat.id
    user = update.effective_user
    return user.id if user is not None else 0


def display_name(user: User | None) -> str:
    """First and last name, else the username, else the id."""
    if user is None:
        return ""
    return " ".join(part for part in (user.first_name, user.last_name) if part) or (
        user.username or str(user.id)
    )


def place_of(message: TgMessage) -> Place | None:
    """The hub chat a message belongs to; None for channels (not supported)."""
    from telegram.constants import ChatType

    chat = message.chat
    if chat.type == ChatType.PRIVATE:
        name = " ".join(p for p in (chat.first_name, chat.last_name) if p) or chat.username or ""
        return Place(chat.id, None, ChatKind.DM, name)
    if chat.type not in (ChatType.GROUP, ChatType.SUPERGROUP):
        return None
    # In a forum, a topic's messages carry its thread id and `is_topic_message`; replies in a
    # plain supergroup carry a thread id too, which must not split the group.
    if message.is_topic_message and message.message_thread_id:
        topic = topic_name(message)
        title = f"{chat.title} / {topic}" if topic and chat.title else ""
        return Place(chat.id, message.message_thread_id, ChatKind.TOPIC, title)
    return Place(chat.id, None, ChatKind.GROUP, chat.title or "")


def topic_name(message: TgMessage) -> str:
    """The forum topic's name when the message carries it (its opening message)."""
    created = message.forum_topic_created
    if created is None and message.reply_to_message is not None:
        created = message.reply_to_message.forum_topic_created
    return created.name if created is not None else ""


def real_reply_to(message: TgMessage) -> TgMessage | None:
    """The message this one answers; not the topic's opening message every topic message
    formally replies to."""
    replied = message.reply_to_message
    if replied is None:
        return None
    if message.is_topic_message and replied.message_id == message.message_thread_id:
        return None
    return replied


def _seconds(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return int(value.total_seconds())
    return int(value)


def _file_fields(obj) -> dict:
    fields = {"file_id": obj.file_id, "file_unique_id": obj.file_unique_id}
    for name in ("file_name", "mime_type", "file_size", "width", "height", "emoji"):
        value = getattr(obj, name, None)
        if value is not None:
            fields[name] = value
    with warnings.catch_warnings():  # PTB 22 moves durations to timedelta: either is fine
        from telegram.warnings import PTBDeprecationWarning

        warnings.simplefilter("ignore", PTBDeprecationWarning)
        duration = _seconds(getattr(obj, "duration", None))
    if duration is not None:
        fields["duration"] = duration
    return fields


def describe(message: TgMessage) -> Content | None:
    """Text for the model and the attachment's metadata; None for service messages."""
    if message.text is not None:
        return Content(message.text)
    caption = message.caption or ""
    kind, fields, label = None, {}, ""
    if message.photo:
        kind, fields = "photo", _file_fields(message.photo[-1])  # the largest size
    elif message.sticker is not None:
        kind, fields = "sticker", _file_fields(message.sticker)
        label = f"sticker {message.sticker.emoji}" if message.sticker.emoji else "sticker"
    elif message.animation is not None:
        kind, fields = "animation", _file_fields(message.animation)
    elif message.video is not None:
        kind, fields = "video", _file_fields(message.video)
    elif message.video_note is not None:
        kind, fields = "video_note", _file_fields(message.video_note)
        label = "video message"
    elif message.voice is not None:
        kind, fields = "voice", _file_fields(message.voice)
        duration = fields.get("duration")
        label = f"voice message, {duration} s" if duration is not None else "voice message"
    elif message.audio is not None:
        kind, fields = "audio", _file_fields(message.audio)
        title = " – ".join(p for p in (message.audio.performer, message.audio.title) if p)
        label = f"audio {title}" if title else "audio"
    elif message.document is not None:
        kind, fields = "document", _file_fields(message.document)
        name = message.document.file_name
        label = f"document {name}" if name else "document"
    elif message.location is not None and message.venue is None:
        kind = "location"
        fields = {"latitude": message.location.latitude, "longitude": message.location.longitude}
        label = f"location {message.location.latitude:.5f}, {message.location.longitude:.5f}"
    elif message.venue is not None:
        kind = "venue"
        fields = {"title": message.venue.title, "address": message.venue.address}
        label = f"venue {message.venue.title}, {message.venue.address}"
    elif message.contact is not None:
        kind = "contact"
        fields = {"name": message.contact.first_name, "phone_number": message.contact.phone_number}
        label = f"contact {message.contact.first_name}"
    elif message.poll is not None:
        kind = "poll"
        options = [option.text for option in message.poll.options]
        fields = {"question": message.poll.question, "options": options}
        label = f"poll {message.poll.question!r}: " + " / ".join(options)
    elif message.dice is not None:
        kind = "dice"
        fields = {"emoji": message.dice.emoji, "value": message.dice.value}
        label = f"dice {message.dice.emoji} = {message.dice.value}"
    if kind is None:
        return None
    fields = {"type": kind, **fields}
    if caption:
        fields["caption"] = caption
    text = f"[{label or kind}]" + (f" {caption}" if caption else "")
    return Content(text, fields, caption=caption, label=f"[{label or kind}]")


def _entities(message: TgMessage) -> dict[MessageEntity, str]:
    if message.text is not None:
        return message.parse_entities()
    if message.caption is not None:
        return message.parse_caption_entities()
    return {}


def command_of(message: TgMessage, identity: BotIdentity) -> Command | None:
    """`/name args` at the start of a text, unless it is addressed to another bot."""
    from telegram import MessageEntity

    text = message.text or ""
    for entity, value in _entities(message).items():
        if entity.type != MessageEntity.BOT_COMMAND or entity.offset != 0:
            continue
        name, _, target = value[1:].partition("@")
        if target and (not identity.username or target.lower() != identity.username.lower()):
            return None
        args = text[len(value) :].strip() if text.startswith(value) else ""
        return Command(name.lower(), args)
    return None


def addresses_bot(message: TgMessage, identity: BotIdentity) -> bool:
    """A mention of the bot, a text mention of it, or a reply to one of its messages."""
    from telegram import MessageEntity

    username = identity.username.lower()
    for entity, value in _entities(message).items():
        if entity.type == MessageEntity.MENTION and username and value[1:].lower() == username:
            return True
        if (
            entity.type == MessageEntity.TEXT_MENTION
            and entity.user is not None
            and entity.user.id == identity.bot_id
        ):
            return True
    replied = real_reply_to(message)
    return bool(
        replied is not None
        and replied.from_user is not None
        and replied.from_user.id == identity.bot_id
    )
