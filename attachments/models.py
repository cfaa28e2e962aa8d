"""Attachments and the blobs that hold their bytes.

A `Blob` is one content, stored once under its SHA-256 in `STORAGES["attachments"]`; any
number of attachments (on any messages, in any chats) point at it. The periodic sweep
deletes blobs no attachment uses. An `Attachment` is one file on one message: what it is
(sniffed from the bytes), its name as given, and what the hub derived from it; derived text
lives here, beside the message, and never rewrites the message's own text.
"""

from django.core.files.storage import storages
from django.core.signals import setting_changed
from django.db import models
from django.dispatch import receiver
from django.utils import timezone
from django.utils.functional import LazyObject, empty

from chats.models import Message


class _AttachmentStorage(LazyObject):
    """`storages["attachments"]`, looked up when first used (and again after STORAGES
    changes), so settings and tests choose the backend."""

    def _setup(self):
        self._wrapped = storages["attachments"]


_storage = _AttachmentStorage()


def attachment_storage():
    """The storage of attachment blobs (the `attachments` alias of STORAGES)."""
    return _storage


@receiver(setting_changed)
def _storages_changed(*, setting, **kwargs):
    if setting == "STORAGES":
        _storage._wrapped = empty


class Blob(models.Model):
    """One content's bytes, named `<first two hex digits>/<sha256>`; never changed once
    written, deleted by the sweep once no attachment uses it."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.PositiveBigIntegerField()
    file = models.FileField(storage=attachment_storage, max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size} bytes)"


class Attachment(models.Model):
    """One file on one message (so in its chat, by its author)."""

    class Kind(models.TextChoices):
        IMAGE = "image", "Image"
        DOCUMENT = "document", "Document"
        AUDIO = "audio", "Audio"
        VIDEO = "video", "Video"
        OTHER = "other", "Other"

    class State(models.TextChoices):
        PENDING = "pending", "Pending"  # stored; what the hub derives from it is not done yet
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"  # `failure` says why, in words a person can read

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachments")
    # PROTECT: a blob goes only through the sweep, once no attachment points at it.
    blob = models.ForeignKey(
        Blob, null=True, blank=True, on_delete=models.PROTECT, related_name="attachments"
    )
    name = models.CharField("file name as given", max_length=255)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    media_type = models.CharField("media type sniffed from the bytes", max_length=127)
    declared_type = models.CharField("media type the sender claimed", max_length=127, blank=True)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    failure = models.CharField(max_length=500, blank=True, default="")
    extracted_text = models.TextField(blank=True, default="")
    page_count = models.PositiveIntegerField(null=True, blank=True)
    description = models.TextField(blank=True, default="")
    # What a person and the model should know beside the derived text: scanned pages not
    # read, pages past the cap, text cut ("Pages 3–7 are scanned images …").
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["message", "id"], name="attachment_message_idx"),
            models.Index(fields=["created_at"], name="attachment_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.media_type}, {self.size} bytes) on message {self.message_id}"

    @property
    def received(self) -> bool:
        """False for a file its channel announced but the hub never got (no bytes, no hash:
        `attachment_record_unreceived`); an empty file was received (its hash is known)."""
        return self.blob_id is not None or bool(self.sha256)

    @property
    def chat_id(self) -> int:
        return self.message.chat_id


class PendingReplyFile(models.Model):
    """A file the agent attached (`file_send`) during a turn whose reply is not stored yet.
    When the turn stores its reply the file becomes an `Attachment` of that reply (in the
    same transaction) and this row goes; a turn that ends without a reply drops it. Its blob
    is already written, so the sweep keeps blobs such a row names."""

    turn = models.ForeignKey(
        "chats.Turn", on_delete=models.CASCADE, related_name="pending_reply_files"
    )
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="pending_reply_files")
    name = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=Attachment.Kind.choices)
    media_type = models.CharField(max_length=127)
    declared_type = models.CharField(max_length=127, blank=True)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.size} bytes) for turn {self.turn_id}"
