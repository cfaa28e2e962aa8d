"""The reply files registry: the files a stored message carries, as a delivery channel
needs them (name, media type, size, bytes), without the channel or `chats` knowing where
files come from.

An app registers a provider `(message) -> list[ReplyFile]` in its `AppConfig.ready()`
(attachments registers the files of a message); a channel (the Telegram bridge) asks
`reply_files(message)` once it sends a reply and sends each file after the text. A provider
that fails is logged and contributes nothing; the channel says so to nobody, since it does
not know a file was meant.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chats.models import Message

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplyFile:
    """One file to send with a reply. `key` is stable across restarts (a channel records
    which keys it sent); `read()` returns the bytes (bounded by the provider's own limits)."""

    key: str
    name: str
    media_type: str
    kind: str  # image, document, audio, video, other
    size: int
    read: Callable[[], bytes]


ReplyFilesProvider = Callable[["Message"], list[ReplyFile]]

_providers: list[ReplyFilesProvider] = []


def register_reply_files(provider: ReplyFilesProvider) -> None:
    if provider not in _providers:
        _providers.append(provider)


def reply_files(message: "Message | None") -> list[ReplyFile]:
    """Every registered provider's files of `message`, in the providers' order."""
    if message is None:
        return []
    files: list[ReplyFile] = []
    for provider in _providers:
        try:
            files.extend(provider(message))
        except Exception:  # noqa: BLE001 - a broken provider must not stop the reply's text
            logger.exception("reply files provider %r failed for message %s", provider, message.pk)
    return files
