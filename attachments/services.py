"""Writes of attachments: storing a file on a message (within the limits) and sweeping
blobs no attachment uses. Each file is stored in its own transaction, after its message:
a refused or failed file never loses the message."""

import hashlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import IO

from celery import current_app
from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from attachments.models import Attachment, Blob, attachment_storage
from attachments.names import clean_file_name
from attachments.processing import PROCESS_TASK, ProcessingFailed, processor_for
from attachments.signals import attachment_settled
from attachments.sniffing import kind_for, sniff_media_type
from attachments.thumbnails import thumbnail_delete
from attachments.waiting import files_hold_lengthen
from chats.agent.registry import CARRIES_KEY
from chats.models import Message

logger = logging.getLogger(__name__)

# A blob is swept only once it has been unused for this long: an upload that wrote its blob
# and has not committed its attachment yet is never swept from under it.
SWEEP_GRACE = timedelta(hours=1)
_READ_CHUNK = 1024 * 1024
CARRIES_NAME = "attachments"  # the message parts provider's name (attachments.apps)


class AttachmentRefused(Exception):
    """A file over a limit: `str(exc)` tells the person why, in words a channel can show;
    `status` is the HTTP status an upload answers with (413 too large, 400 too many)."""

    def __init__(self, reason: str, *, status: int = 413):
        super().__init__(reason)
        self.status = status


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size} bytes"


def _read_bounded(file: IO[bytes], limit: int) -> bytes:
    """The file's bytes, refused as soon as they pass `limit` (never reads much beyond)."""
    chunks, total = [], 0
    while chunk := file.read(_READ_CHUNK):
        total += len(chunk)
        if total > limit:
            raise AttachmentRefused(
                f"The file is larger than {_megabytes(limit)}; a file may have at most "
                f"{_megabytes(limit)}."
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _check_limits(message: Message, size: int) -> None:
    """Raise AttachmentRefused for a file over the per-file, per-message or per-chat-day
    limit (the message row is locked by the caller, so two uploads count each other)."""
    if size > settings.ATTACHMENTS_MAX_FILE_BYTES:
        raise AttachmentRefused(
            f"The file is {_megabytes(size)}; a file may have at most "
            f"{_megabytes(settings.ATTACHMENTS_MAX_FILE_BYTES)}."
        )
    on_message = Attachment.objects.filter(message=message).count()
    if on_message >= settings.ATTACHMENTS_MAX_PER_MESSAGE:
        raise AttachmentRefused(
            f"A message may carry at most {settings.ATTACHMENTS_MAX_PER_MESSAGE} files.",
            status=400,
        )
    since = timezone.now() - timedelta(days=1)
    today = (
        # A file never received (its size as announced) took no room: it does not count.
        Attachment.objects.filter(
            message__chat_id=message.chat_id, created_at__gte=since, blob__isnull=False
        )
        .aggregate(total=Sum("size"))
        .get("total")
        or 0
    )
    if today + size > settings.ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY:
        raise AttachmentRefused(
            f"This chat has received {_megabytes(today)} of files in the last 24 hours; "
            f"{_megabytes(settings.ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY)} is the most it may "
            "receive in a day. Try again later or send a smaller file."
        )


def blob_for(data: bytes, sha256: str) -> Blob:
    """The blob holding `data`, written to storage only when no blob has this hash. The row
    comes first and stays locked until the caller commits: two uploads of the same bytes,
    and the sweep of files no row names (attachments/sweeping.py), wait on its key, so the
    file is written only by the one who created the row, always under its own name
    `<sha256[:2]>/<sha256>`. A file already there with no row was left by a transaction
    that rolled back after writing it: it is written again (its bytes may be partial)."""
    name = f"{sha256[:2]}/{sha256}"
    blob, created = Blob.objects.select_for_update().get_or_create(
        sha256=sha256, defaults={"size": len(data), "file": name}
    )
    if not created:
        return blob
    storage = attachment_storage()
    if storage.exists(name):
        storage.delete(name)
    saved = storage.save(name, ContentFile(data))
    if saved != name:  # a storage that renames rather than overwrite: keep what it chose
        blob.file.name = saved
        blob.save(update_fields=["file"])
    return blob


def mark_carrying(message: Message) -> None:
    """Name this app in the message's `carries` metadata, so that the context builder asks
    it about the message's files (and never asks about a message without any)."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    names = metadata.get(CARRIES_KEY) or []
    if CARRIES_NAME in names:
        return
    message.metadata = {**metadata, CARRIES_KEY: [*names, CARRIES_NAME]}
    Message.objects.filter(pk=message.pk).update(metadata=message.metadata)


@dataclass(frozen=True)
class Sniffed:
    media_type: str
    kind: str
    sha256: str


def sniff_bytes(data: bytes) -> Sniffed:
    media_type = sniff_media_type(data)
    return Sniffed(media_type, kind_for(media_type), hashlib.sha256(data).hexdigest())


def attachment_store(
    *,
    message: Message,
    name: str,
    data: bytes | None = None,
    file: IO[bytes] | None = None,
    declared_type: str = "",
) -> Attachment:
    """Store one file on `message` in its own transaction: its media type and kind sniffed
    from the bytes (`declared_type` is kept only as what the sender claimed), its name
    cleaned, its bytes in one blob per SHA-256. Over a limit: AttachmentRefused (nothing is
    stored; the message stays). An empty file is kept as `failed`, with the reason."""
    if (data is None) == (file is None):
        raise TypeError("attachment_store takes exactly one of data= or file=")
    if data is None:
        data = _read_bounded(file, settings.ATTACHMENTS_MAX_FILE_BYTES)
    sniffed = sniff_bytes(data)
    with transaction.atomic():
        locked = Message.objects.select_for_update().get(pk=message.pk)
        _check_limits(locked, len(data))
        fields = {
            "message": locked,
            "name": clean_file_name(name),
            "kind": sniffed.kind,
            "media_type": sniffed.media_type,
            "declared_type": (declared_type or "")[:127],
            "size": len(data),
            "sha256": sniffed.sha256,
        }
        mark_carrying(locked)
        message.metadata = locked.metadata
        if not data:
            return Attachment.objects.create(
                **fields, state=Attachment.State.FAILED, failure="The file is empty (0 bytes)."
            )
        attachment = Attachment(**fields, blob=blob_for(data, sniffed.sha256))
        processor = processor_for(attachment)
        attachment.state = Attachment.State.PENDING if processor else Attachment.State.READY
        attachment.save()
        if processor is not None:
            transaction.on_commit(lambda: _process_enqueue(attachment.pk, processor.task))
            if processor.wait_seconds:
                files_hold_lengthen(message)
        return attachment


def attachment_record_unreceived(
    *,
    message: Message,
    name: str,
    kind: str,
    failure: str,
    declared_type: str = "",
    size: int | None = None,
) -> Attachment:
    """Record on `message` a file its channel announced but the hub never received (Telegram
    could not hand it over, or it was over a limit): `failed` with `failure` (words a person
    can read), no bytes, no media type (nothing was sniffed), the size as announced (0 when
    unknown). The history, the dashboard, the API and the model see it; no processor runs.
    Once per message and name (a redelivered task records nothing twice)."""
    with transaction.atomic():
        locked = Message.objects.select_for_update().get(pk=message.pk)
        name = clean_file_name(name)
        found = Attachment.objects.filter(
            message=locked, name=name, blob__isnull=True, sha256=""
        ).first()
        if found is not None:
            return found
        mark_carrying(locked)
        message.metadata = locked.metadata
        return Attachment.objects.create(
            message=locked,
            name=name,
            kind=kind if kind in Attachment.Kind.values else Attachment.Kind.OTHER,
            media_type="",
            declared_type=(declared_type or "")[:127],
            size=max(int(size or 0), 0),
            sha256="",
            state=Attachment.State.FAILED,
            failure=failure[:500],
        )


def attachment_from_blob(
    *,
    message: Message,
    blob: Blob,
    name: str,
    kind: str,
    media_type: str,
    size: int,
    declared_type: str = "",
) -> Attachment:
    """An attachment of `message` on a blob already stored (its type sniffed when the blob
    was written), within the caller's transaction; processed like any stored file."""
    attachment = Attachment(
        message=message,
        blob=blob,
        name=clean_file_name(name),
        kind=kind,
        media_type=media_type,
        declared_type=(declared_type or "")[:127],
        size=size,
        sha256=blob.sha256,
    )
    processor = processor_for(attachment)
    attachment.state = Attachment.State.PENDING if processor else Attachment.State.READY
    attachment.save()
    if processor is not None:
        transaction.on_commit(lambda: _process_enqueue(attachment.pk, processor.task))
        if processor.wait_seconds:
            files_hold_lengthen(message)
    return attachment


def _process_enqueue(attachment_id: int, task: str = PROCESS_TASK) -> None:
    """Send the file to its processor's task (the files' queue unless the processor names
    its own); a dead broker leaves it `pending`, and the waiting turn goes ahead after its
    bounded wait (the message and the file are kept)."""
    try:
        current_app.send_task(task, args=[attachment_id])
    except Exception:  # noqa: BLE001 - the broker being down must not fail the upload
        logger.exception("could not enqueue the processing of attachment %s", attachment_id)


def attachment_process(attachment_id: int) -> Attachment | None:
    """Run the processor that wants this `pending` file and store what it derived, setting
    `ready` or `failed`; then send `attachment_settled`. Nothing is locked while the
    processor computes. Returns the attachment, or None when it is gone or already settled."""
    attachment = (
        Attachment.objects.filter(pk=attachment_id)
        .select_related("blob", "message__chat", "message__actor")
        .first()
    )
    if attachment is None or attachment.state != Attachment.State.PENDING:
        return None
    processor = processor_for(attachment)
    changes: dict = {"state": Attachment.State.READY, "failure": ""}
    if processor is not None:
        try:
            derived = processor.run(attachment)
        except ProcessingFailed as exc:
            changes = {"state": Attachment.State.FAILED, "failure": str(exc)[:500]}
        except Exception:  # noqa: BLE001 - one file never kills the worker
            logger.exception("processor %r failed on attachment %s", processor.name, attachment_id)
            changes = {
                "state": Attachment.State.FAILED,
                "failure": "The hub could not read this file.",
            }
        else:
            for name in ("extracted_text", "page_count", "description", "note"):
                value = getattr(derived, name)
                if value is not None:
                    changes[name] = value
    updated = Attachment.objects.filter(pk=attachment_id, state=Attachment.State.PENDING).update(
        **changes
    )
    if not updated:
        return None
    attachment.refresh_from_db()
    transaction.on_commit(lambda: attachment_settled.send(sender=Attachment, attachment=attachment))
    return attachment


def blobs_sweep(*, now=None) -> int:
    """Delete every blob no attachment (nor a file the agent is attaching to its reply) has
    used for SWEEP_GRACE (its file, then its row);
    returns how many. Each blob is locked and checked again, so a blob an upload takes at
    the same moment is kept."""
    cutoff = (now or timezone.now()) - SWEEP_GRACE
    candidates = Blob.objects.filter(
        attachments__isnull=True, pending_reply_files__isnull=True, created_at__lt=cutoff
    )
    deleted = 0
    for sha256 in list(candidates.values_list("sha256", flat=True)[:1000]):
        with transaction.atomic():
            blob = Blob.objects.select_for_update().filter(sha256=sha256).first()
            if blob is None or blob.attachments.exists() or blob.pending_reply_files.exists():
                continue
            try:
                attachment_storage().delete(blob.file.name)
                thumbnail_delete(sha256)
            except Exception:  # noqa: BLE001 - a storage error leaves the row for the next run
                logger.exception("could not delete the file of blob %s", sha256)
                continue
            blob.delete()
            deleted += 1
    return deleted
