"""State of the Telegram bridge: what was processed, what must still be sent, who may talk.

- `BotState`: the bot's identity (from getMe) and the persisted long-polling offset.
- `ProcessedUpdate`: one row per handled `update_id`; the unique constraint is what makes a
  redelivered update (or a restart in the middle of a burst) a no-op.
- `OutboundMessage`: the outbox. Everything the bridge sends is a row written in the same
  transaction as the update that caused it, so a crash between storing and sending is
  completed by the next bot process, and the Telegram message ids are recorded.
- `PairingRequest`: an unknown user's request to talk to the bot in a private chat.
- `LinkCode`: a one-time code a Person creates on the dashboard to link their Telegram user.
"""

import hashlib

from django.conf import settings
from django.db import models
from django.utils import timezone


class BotState(models.Model):
    """One row per bot (the numeric id in front of the token's colon)."""

    bot_id = models.BigIntegerField(unique=True)
    username = models.CharField(max_length=64, blank=True, default="")
    # The next getUpdates offset: every update below it is processed.
    offset = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"@{self.username or self.bot_id} (offset {self.offset})"


class ProcessedUpdate(models.Model):
    """An update whose effects are stored; a second delivery of it changes nothing."""

    bot_id = models.BigIntegerField()
    update_id = models.BigIntegerField()
    kind = models.CharField(max_length=32, blank=True, default="")
    outcome = models.CharField(max_length=32, blank=True, default="")
    processed_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bot_id", "update_id"], name="bots_update_once")
        ]

    def __str__(self) -> str:
        return f"update {self.update_id} ({self.kind}: {self.outcome})"


class OutboundMessage(models.Model):
    """Something to send to Telegram, with what was sent so far (the crash-safe outbox).

    `reply`: stream the answer of `turn` (edits of one message, then further parts);
    `send` / `edit` / `answer`: one Bot API call (sendMessage, editMessageText,
    answerCallbackQuery) with `payload` as its arguments."""

    class Kind(models.TextChoices):
        REPLY = "reply", "Agent reply"
        SEND = "send", "Message"
        EDIT = "edit", "Edit"
        ANSWER = "answer", "Callback answer"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENDING = "sending", "Sending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    OPEN = (Status.PENDING, Status.SENDING)

    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    turn = models.OneToOneField(
        "chats.Turn",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="telegram_delivery",
    )
    chat = models.ForeignKey(
        "chats.Chat", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    telegram_chat_id = models.BigIntegerField()
    thread_id = models.BigIntegerField(null=True, blank=True)
    reply_to_message_id = models.BigIntegerField(null=True, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    # Telegram message ids sent for this row, in order (part 1 first).
    message_ids = models.JSONField(default=list, blank=True)
    parts_sent = models.PositiveIntegerField(default=0)
    text = models.TextField(blank=True, default="", help_text="The final text delivered.")
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "id"], name="bots_outbox_status_idx")]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} to {self.telegram_chat_id} ({self.status})"


class PairingRequest(models.Model):
    """An unknown Telegram user asking to use the bot; staff approve or reject it."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    user_id = models.BigIntegerField(unique=True)
    display_name = models.CharField(max_length=255, blank=True, default="")
    username = models.CharField(max_length=64, blank=True, default="")
    code = models.CharField(max_length=16)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.display_name or self.user_id} ({self.status})"


def hash_link_code(code: str) -> str:
    normalized = code.strip().upper().replace("-", "").replace(" ", "")
    return hashlib.sha256(normalized.encode()).hexdigest()


class LinkCode(models.Model):
    """A one-time code that links the Telegram user who sends `/link <code>` to `person`.

    Only its SHA-256 is stored; it expires after TELEGRAM_LINK_CODE_TTL_MINUTES."""

    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="telegram_link_codes"
    )
    code_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(
        "chats.Actor", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"link code of {self.person} ({'used' if self.used_at else 'open'})"

    @property
    def is_usable(self) -> bool:
        return self.used_at is None and self.expires_at > timezone.now()
