"""Files that arrive on Telegram: photos (the largest size Telegram offers), documents, and
voice notes, audio files and video notes (stored like documents; what the hub derives from
them, a transcript, is the processors' business, `attachments.processing`).

Registered with the bridge's media registry (`bots.media`) in `AttachmentsConfig.ready()`:
the dispatcher names no file. For a message it takes, in the update's transaction, it holds
the message's turn until its file is read (`attachments.waiting`) and, after the commit,
sends `attachments.tasks.fetch_telegram_file` to the files' queue: never a network call on
the update's path (the webhook's request, the polling loop). The task asks the Bot API where
the file is (getFile), downloads it within TELEGRAM_FILE_TIMEOUT_SECONDS and at most
ATTACHMENTS_MAX_FILE_BYTES, and stores it on the message like any upload (sniffed, limits).

A file that cannot be had is recorded on its message as a `failed` attachment with no bytes
(`attachment_record_unreceived`: its name, the type and size Telegram announced, and why:
"Could not be fetched from Telegram: …"), so the history, the dashboard, the API and the
model see it, and it is told to the chat as a notice (which the bridge sends to Telegram).
The message is kept and its turn goes on, the model told plainly the file did not come:
over the Bot API's 20 MB download limit (a local Bot API server, TELEGRAM_API_BASE_URL,
lifts it), over the hub's limits, getFile refused, or a download that failed or took longer
than TELEGRAM_FILE_TIMEOUT_SECONDS. Stickers, animations and the rest stay a label in the
message's text.
"""

import logging
import threading
from pathlib import PurePosixPath

from celery import shared_task
from django.conf import settings
from django.db import transaction

from attachments.live import attachment_settled_announce
from attachments.models import Attachment
from attachments.services import (
    AttachmentRefused,
    attachment_record_unreceived,
    attachment_store,
)
from attachments.sniffing import kind_for
from attachments.waiting import files_hold, files_hold_release_if_settled
from bots import bot_api
from bots.media import MediaMessage
from chats.models import Message
from chats.notices import chat_notice_post

logger = logging.getLogger(__name__)

TAKEN = ("photo", "document", "voice", "audio", "video_note", "video")
NOTICE_KIND = "attachment_not_received"
# What a file is called when Telegram gives it no name (voice and video notes never have one).
_WHAT = {
    "voice": "The voice message",
    "video_note": "The video message",
    "audio": "The audio",
    "video": "The video",
}
# The name's ending when the Bot API's file path has none.
_SUFFIX = {
    "photo": ".jpg",
    "voice": ".ogg",
    "audio": ".mp3",
    "video_note": ".mp4",
    "video": ".mp4",
}
# The kind of a file that never arrived (nothing to sniff): what Telegram says it is.
_KIND = {
    "photo": Attachment.Kind.IMAGE,
    "voice": Attachment.Kind.AUDIO,
    "audio": Attachment.Kind.AUDIO,
    "video_note": Attachment.Kind.VIDEO,
    "video": Attachment.Kind.VIDEO,
}
_DECLARED = {"photo": "image/jpeg", "video_note": "video/mp4"}  # Telegram sends no mime_type


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size} bytes"


def telegram_media_takes(media: dict) -> bool:
    """The media handler's predicate: photos, documents, voice notes, audio, video notes,
    videos."""
    return media.get("type") in TAKEN and bool(media.get("file_id"))


def telegram_media_take(item: MediaMessage) -> bool:
    """The media handler: hold the message's turn, fetch its file after the commit."""
    files_hold(
        message=item.message,
        respond=item.respond,
        extra_seconds=settings.TELEGRAM_FILE_TIMEOUT_SECONDS,
    )
    message_id = item.message.pk
    transaction.on_commit(lambda: _fetch_enqueue(message_id))
    return True


def _fetch_enqueue(message_id: int) -> None:
    try:
        fetch_telegram_file.delay(message_id)
    except Exception:  # noqa: BLE001 - the turn still goes after its bounded wait
        logger.exception("could not enqueue the Telegram file of message %s", message_id)


class NotReceived(Exception):
    """The file could not be had: `str(exc)` tells the chat why; `cause` says it on the
    file's failed record ("could not be fetched from Telegram: …")."""

    def __init__(self, notice: str, cause: str):
        super().__init__(notice)
        self.cause = cause


def _file_name(media: dict, file_path: str, telegram_message_id) -> str:
    if media.get("file_name"):
        return media["file_name"]
    suffix = PurePosixPath(file_path).suffix or _SUFFIX.get(media.get("type"), "")
    return f"{media.get('type', 'file')}_{telegram_message_id}{suffix}"


def _what(media: dict) -> str:
    return media.get("file_name") or _WHAT.get(media.get("type"), "The file")


def _download(media: dict) -> tuple[str, bytes]:
    """(file path, bytes) of the message's file; NotReceived with the reason."""
    size = media.get("file_size") or 0
    what = _what(media)
    if bot_api.uses_cloud_api() and size > bot_api.CLOUD_DOWNLOAD_LIMIT:
        raise _too_big_for_telegram(what, size)
    timeout = settings.TELEGRAM_FILE_TIMEOUT_SECONDS
    try:
        # Asked first (no download): its refusal says more than the hub's own limit.
        path = bot_api.file_path_of(media["file_id"], timeout=timeout)
    except bot_api.FileTooBig:
        raise _too_big_for_telegram(what, size) from None
    except bot_api.BotApiError as exc:
        logger.warning("Telegram file %s: getFile failed: %s", media.get("file_unique_id"), exc)
        raise _failed(what, _said(exc, "Telegram did not say where the file is"), timeout) from None
    if size > settings.ATTACHMENTS_MAX_FILE_BYTES:
        raise _over_hub_limit(what, size)
    try:
        data = bot_api.file_download(
            path, limit=settings.ATTACHMENTS_MAX_FILE_BYTES, timeout=timeout
        )
    except bot_api.FileOverLimit:
        raise _over_hub_limit(what, size) from None
    except bot_api.BotApiError as exc:
        logger.warning("Telegram file %s not downloaded: %s", media.get("file_unique_id"), exc)
        raise _failed(what, _said(exc, "the download failed"), timeout) from None
    return path, data


def _said(exc: Exception, cause: str) -> str:
    """A cause a person can read, with what Telegram or the network said (no token: the
    Bot API's errors never carry it)."""
    detail = str(exc).partition(": ")[2].strip() or str(exc)
    return f"{cause} ({detail[:160]})" if detail else cause


def _failed(what: str, cause: str, timeout: float) -> NotReceived:
    if "timeout" in cause.lower() or "timed out" in cause.lower():
        cause = f"Telegram did not hand it over within {timeout:g} seconds"
    return NotReceived(
        f"{what} could not be downloaded from Telegram.",
        f"Could not be fetched from Telegram: {cause}.",
    )


def _too_big_for_telegram(what: str, size: int) -> NotReceived:
    shown = f" is {_megabytes(size)}:" if size else " is too big:"
    limit = "Telegram lets a bot download files of at most 20 MB"
    it_is = f"it is {_megabytes(size)}" if size else "it is bigger than that"
    return NotReceived(
        f"{what}{shown} {limit}. Send a smaller file (or a link to it).",
        f"Could not be fetched from Telegram: {it_is}, and {limit}.",
    )


def _over_hub_limit(what: str, size: int) -> NotReceived:
    limit = _megabytes(settings.ATTACHMENTS_MAX_FILE_BYTES)
    shown = _megabytes(size) if size else f"larger than {limit}"
    return NotReceived(
        f"{what} is {shown}; a file may have at most {limit}.",
        f"Not fetched from Telegram: it is {shown}, and a file may have at most {limit} here.",
    )


def telegram_file_fetch(message_id: int) -> Attachment | None:
    """Fetch and store the Telegram file of a stored message, once (a redelivered task finds
    it stored); a file that cannot be had is told to the chat. Then the turn goes on."""
    message = Message.objects.select_related("chat").filter(pk=message_id).first()
    if message is None:
        return None
    try:
        if Attachment.objects.filter(message_id=message_id).exists():
            return None
        return _fetch_and_store(message)
    finally:
        files_hold_release_if_settled(message_id)


def _fetch_and_store(message: Message) -> Attachment | None:
    telegram = (message.metadata or {}).get("telegram") or {}
    media = telegram.get("attachment") or {}
    if media.get("type") not in TAKEN or not media.get("file_id"):
        return None
    path = ""
    try:
        path, data = _download(media)
        return attachment_store(
            message=message,
            name=_file_name(media, path, telegram.get("message_id")),
            data=data,
            declared_type=media.get("mime_type", ""),
        )
    except NotReceived as exc:
        reason, cause = str(exc), exc.cause
    except AttachmentRefused as exc:
        reason = f"{_what(media)} was not stored: {exc}"
        cause = f"Not stored: {exc}"
    _record_unreceived(message, media, path, telegram.get("message_id"), cause)
    chat_notice_post(
        chat=message.chat,
        text=f"{reason} The message was kept without it.",
        kind=NOTICE_KIND,
        detail={"about_message": message.pk},
    )
    return None


def _record_unreceived(message: Message, media: dict, path: str, telegram_id, cause: str):
    """The file's failed record, so every reader and the model see it did not come."""
    declared = media.get("mime_type") or _DECLARED.get(media.get("type"), "")
    kind = _KIND.get(media.get("type")) or (kind_for(declared) if declared else None)
    try:
        record = attachment_record_unreceived(
            message=message,
            name=_file_name(media, path, telegram_id),
            kind=kind or Attachment.Kind.OTHER,
            declared_type=declared,
            size=media.get("file_size"),
            failure=cause,
        )
    except Exception:  # noqa: BLE001 - the notice still tells the chat
        logger.exception("could not record the missing file of message %s", message.pk)
        return None
    # Open pages show the message's failed card without a reload.
    transaction.on_commit(lambda: attachment_settled_announce(Attachment, attachment=record))
    return record


# One download at a time per process (bounded by TELEGRAM_FILE_TIMEOUT_SECONDS): the files'
# worker shares its threads with reviews and the dispatcher, which must find one free.
_fetching = threading.BoundedSemaphore(1)
BUSY_RETRY_SECONDS = 1


@shared_task(
    bind=True,
    name="attachments.tasks.fetch_telegram_file",  # routed to the files' queue (tasks.py)
    ignore_result=True,
    acks_late=True,
    max_retries=None,
)
def fetch_telegram_file(self, message_id: int) -> bool:
    """Download and store the file of a Telegram message (photo, document, voice note,
    audio, video note, video), or record why it could not be had; its turn goes on
    afterwards (docs/ATTACHMENTS.md, "Telegram")."""
    if not _fetching.acquire(blocking=False):
        raise self.retry(countdown=BUSY_RETRY_SECONDS)
    try:
        return telegram_file_fetch(message_id) is not None
    finally:
        _fetching.release()
