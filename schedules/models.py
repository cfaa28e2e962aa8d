"""Schedules: prompts that run on time in a chat, and a record of every slot.

A Schedule says when (a cron expression in an IANA time zone, an interval, or once at a
time), where (the target chat) and what (the prompt). Each fire time is a *slot*; each slot
the dispatcher sees gets exactly one ScheduleRun row (unique with the schedule), whatever
happens to beat: `due → running → delivered | awaiting_delivery | failed | skipped`, or
`missed` when the hub was down at its time. Writes go through `schedules.services` and
`schedules.dispatch`, reads through `schedules.selectors`. See docs/SCHEDULES.md.
"""

from django.conf import settings
from django.db import models
from django.utils.timezone import now

from chats.models import Chat, Turn


class Schedule(models.Model):
    """A prompt that runs in a chat at the times its cron expression, interval or run_at say."""

    class Kind(models.TextChoices):
        CRON = "cron", "Cron expression"
        INTERVAL = "interval", "Every N minutes"
        ONCE = "once", "Once"

    class CatchUp(models.TextChoices):
        SKIP = "skip", "Record each missed slot as missed, run the next one"
        ONCE = "once", "Run once for all missed slots"

    class Mode(models.TextChoices):
        CHAT = "chat", "A turn in the chat's own conversation"
        # Its turn's history is only this schedule's earlier runs (schedules.history).
        ISOLATED = "isolated", "A fresh context that sees only this schedule's runs"

    class Approval(models.TextChoices):
        # Made by a person (page, command) or by the agent in its owner's private chat.
        APPROVED = "approved", "Approved"
        # Made by the agent in a shared chat: disabled until a chat admin approves it
        # (schedules.proposals); the dispatcher reads only enabled schedules.
        PENDING = "pending", "Waiting for a chat admin"
        REJECTED = "rejected", "Rejected by a chat admin"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="schedules"
    )
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="schedules")
    prompt = models.TextField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    cron = models.CharField("cron expression", max_length=255, blank=True, default="")
    interval_minutes = models.PositiveIntegerField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True)
    timezone = models.CharField("IANA time zone", max_length=64, default="UTC")
    # Intervals count from here (real elapsed time, whatever the clocks on the wall do).
    anchor_at = models.DateTimeField(default=now)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.SKIP)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.CHAT)
    enabled = models.BooleanField(default=True)
    paused_reason = models.CharField(max_length=255, blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    approval = models.CharField(max_length=16, choices=Approval.choices, default=Approval.APPROVED)
    approval_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="approved or rejected by",
    )
    approval_at = models.DateTimeField("approved or rejected at", null=True, blank=True)
    # The first slot not yet claimed; None once a one-off schedule has fired.
    next_fire_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The dispatcher reads only enabled schedules that are due.
            models.Index(
                fields=["next_fire_at"],
                condition=models.Q(enabled=True),
                name="schedule_due_idx",
            ),
            # The Approvals page and the badge read the pending ones.
            models.Index(
                fields=["chat"],
                condition=models.Q(approval="pending"),
                name="schedule_pending_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"schedule #{self.pk} in {self.chat_id}: {self.prompt[:40]}"


class ScheduleRun(models.Model):
    """One slot of a schedule: at most one row per (schedule, slot), so a slot runs once."""

    class Status(models.TextChoices):
        DUE = "due", "Due (waiting for the chat to be free)"
        RUNNING = "running", "Running"
        DELIVERED = "delivered", "Delivered"
        # The reply is stored and queued for Telegram; not every part is confirmed yet.
        AWAITING_DELIVERY = "awaiting_delivery", "Stored, delivery not confirmed"
        FAILED = "failed", "Failed"
        SKIPPED = "skipped", "Skipped"
        MISSED = "missed", "Missed"

    FINISHED = frozenset(
        {Status.DELIVERED, Status.AWAITING_DELIVERY, Status.FAILED, Status.SKIPPED, Status.MISSED}
    )

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    slot_at = models.DateTimeField("slot time")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DUE)
    # Why it was skipped or missed, or what the run covers (a catch-up run).
    reason = models.CharField(max_length=255, blank=True, default="")
    trigger = models.ForeignKey(
        "chats.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="schedule_runs"
    )
    # Receipts: where the reply went, e.g. [{"channel": "web", "message": 12, "stored": true}].
    delivered_to = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, default="")
    # Which dispatcher pass inserted the row (it reads back its own claims by this token).
    claim_token = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField(default=now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Seconds from the slot time to the start (waiting for a busy chat, a late dispatcher).
    lateness_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-slot_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "slot_at"], name="schedule_run_once_per_slot"
            )
        ]
        indexes = [
            models.Index(fields=["claim_token"], name="schedule_run_claim_idx"),
            models.Index(
                fields=["slot_at"], condition=models.Q(status="due"), name="schedule_run_due_idx"
            ),
            models.Index(
                fields=["turn"], condition=models.Q(status="running"), name="schedule_run_open_idx"
            ),
        ]

    def __str__(self) -> str:
        return (
            f"run of schedule #{self.schedule_id} at {self.slot_at:%Y-%m-%d %H:%M}: {self.status}"
        )


class PersonPreference(models.Model):
    """A person's own settings that pages use to show things their way: for now the time
    zone fire times and run times are shown in (empty: the site's TIME_ZONE). Kept here
    until the hub has an accounts app; read it through `schedules.selectors.person_timezone`."""

    person = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="preference",
    )
    timezone = models.CharField("IANA time zone", max_length=64, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"preferences of {self.person_id}"
