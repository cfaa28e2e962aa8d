"""What a Telegram message carries besides its text (a photo, a document), handed to the
apps that take it, through a registry: the dispatcher names no such app.

A handler registers in its app's `AppConfig.ready()` (`register_media_handler(name,
takes=..., take=...)`), the way button handlers register with `bots.callbacks`. The
dispatcher asks `takes(media)` before storing the message (a file an app takes is not
written into the text: the caption is the text, or a label such as "[photo]" without one),
then offers the stored message to `take`, in the update's transaction (so what a handler
records commits exactly once, with the processed update id); the first that takes it
returns True. A handler must be quick and do no network I/O there: it queues its work
after the commit, and holds the message's turn (`chats.agent.holds`) until that work is done
when the turn needs it. Adding a handler touches no other handler.

And the albums: Telegram sends one update per item of a `media_group_id`; each item holds
its turn for TELEGRAM_MEDIA_GROUP_QUIET_SECONDS after the last item arrived, so the album
gets one turn (for its newest item, with the others before it in the history), not one per
item. That is Telegram's grouping, not a file's: it lives here.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from bots.updates import Place
from chats.agent.holds import turn_hold_place
from chats.models import Message

if TYPE_CHECKING:  # python-telegram-bot loads only where Telegram is spoken
    from telegram import Message as TgMessage

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MediaMessage:
    """A stored message with media: the Telegram message, the hub's message (whose
    `metadata["telegram"]["attachment"]` describes the media), where it lives, and whether
    its sender wants an answer."""

    telegram: "TgMessage"
    message: Message
    place: Place
    respond: bool

    @property
    def media(self) -> dict:
        return (self.message.metadata or {}).get("telegram", {}).get("attachment") or {}


@dataclass(frozen=True)
class MediaHandler:
    # Pure, no I/O: whether it takes media like this (`metadata["telegram"]["attachment"]`:
    # "type", "file_id", "file_name", "file_size", ...). Asked before the message is stored:
    # a file an app takes is not written into the message's text (its caption is the text).
    takes: Callable[[dict], bool]
    # Take it (in the update's transaction); True when it did.
    take: Callable[[MediaMessage], bool]


_handlers: dict[str, MediaHandler] = {}


def register_media_handler(
    name: str, *, takes: Callable[[dict], bool], take: Callable[[MediaMessage], bool]
) -> None:
    """Offer the media of stored Telegram messages that `takes` accepts to `take`
    (registering the same name again replaces it: a second ready() is harmless)."""
    _handlers[name] = MediaHandler(takes, take)


def unregister_media_handler(name: str) -> None:
    _handlers.pop(name, None)


def media_taken(media: dict | None) -> bool:
    """Whether a registered handler takes media like this (no I/O)."""
    if not media:
        return False
    for name, handler in list(_handlers.items()):
        try:
            if handler.takes(media):
                return True
        except Exception:  # noqa: BLE001 - a broken predicate must not block the update
            logger.exception("media handler %r failed to answer takes()", name)
    return False


def media_take(item: MediaMessage) -> bool:
    """Offer the message's media to the handlers that take it (in the update's
    transaction); True when one took it. A failing handler is logged and the next one
    asked: its savepoint is rolled back, the message stays."""
    if not item.media:
        return False
    for name, handler in list(_handlers.items()):
        try:
            if not handler.takes(item.media):
                continue
            with transaction.atomic():
                if handler.take(item):
                    return True
        except Exception:  # noqa: BLE001 - one app's failure never loses the message
            logger.exception("media handler %r failed on message %s", name, item.message.pk)
    return False


def album_key(message: "TgMessage") -> str:
    return f"telegram-album:{message.media_group_id}" if message.media_group_id else ""


def album_hold(item: MediaMessage) -> bool:
    """Hold an album item's turn for the album's quiet period (in the update's transaction);
    False for a message of no album."""
    key = album_key(item.telegram)
    if not key:
        return False
    quiet = settings.TELEGRAM_MEDIA_GROUP_QUIET_SECONDS
    turn_hold_place(
        message=item.message,
        quiet_seconds=quiet,
        deadline_seconds=quiet,
        group_key=key,
        respond=item.respond,
    )
    return True
