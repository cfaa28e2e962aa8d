"""The learning loop's records: per-chat nudge counters and one row per background review.

**ChatLearning** (one per chat, created on its first completed turn) holds the two counters
of the nudge engine: user turns since the last memory review, tool-loop iterations since
the last skill review, with optional per-chat intervals and the quiet-notice switch.
**Review** is one background review run: what triggered it, what it cost, what it
concluded, and (through `MemoryEntry.review` and `SkillProposal.review`) what it proposed.
**CuratorState** (one row) remembers when the skills curator first ran.
Writes go through `learning.services` and `learning.review`, reads through
`learning.selectors`.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone

from chats.models import Chat, Turn


class ChatLearning(models.Model):
    """The nudge counters of one chat and its own settings for them."""

    chat = models.OneToOneField(Chat, on_delete=models.CASCADE, related_name="learning")
    user_turns_since_memory_review = models.PositiveIntegerField(default=0)
    iterations_since_skill_review = models.PositiveIntegerField(default=0)
    memory_interval = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="User turns between memory reviews in this chat; empty: the site default "
        "(LEARNING_MEMORY_REVIEW_INTERVAL); 0: no memory reviews here.",
    )
    skill_interval = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Tool-loop iterations between skill reviews in this chat; empty: the site "
        "default (LEARNING_SKILL_REVIEW_INTERVAL); 0: no skill reviews here.",
    )
    review_notice = models.BooleanField(
        default=False,
        help_text="After a review that proposed something, add a quiet notice to the chat "
        "(“Saved for review: …”). The model never sees it.",
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "chat learning settings"
        verbose_name_plural = "chat learning settings"

    def __str__(self) -> str:
        return f"learning in {self.chat}"

    @property
    def effective_memory_interval(self) -> int:
        if self.memory_interval is not None:
            return self.memory_interval
        return settings.LEARNING_MEMORY_REVIEW_INTERVAL

    @property
    def effective_skill_interval(self) -> int:
        if self.skill_interval is not None:
            return self.skill_interval
        return settings.LEARNING_SKILL_REVIEW_INTERVAL


class Review(models.Model):
    """One background review: a bounded agent run over a chat's recent history that may
    propose memory and skill changes (never apply them)."""

    class Focus(models.TextChoices):
        MEMORY = "memory", "Memory"
        SKILLS = "skills", "Skills"
        COMBINED = "combined", "Memory and skills"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        # Not run: a review gate (a used-up budget) refused it before any model call.
        SKIPPED = "skipped", "Skipped"

    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="reviews")
    turn = models.ForeignKey(
        Turn,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The completed turn after which the counters crossed their interval.",
    )
    turn_number = models.PositiveIntegerField(
        default=0, help_text="That turn's number in its chat (1 = the chat's first turn)."
    )
    focus = models.CharField(max_length=16, choices=Focus.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # The counters and intervals that triggered it, as they stood before the reset.
    trigger = models.JSONField(default=dict, blank=True)
    # The history it read: message ids after `covers_after_id`, up to `covers_to_id`.
    covers_after_id = models.BigIntegerField(null=True, blank=True)
    covers_to_id = models.BigIntegerField(null=True, blank=True)
    snapshot_tokens = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=255, blank=True, default="")
    provider = models.CharField(max_length=64, blank=True, default="")
    worker = models.CharField(max_length=255, blank=True, default="")  # the one running it
    iterations = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    refused_calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="At the model's price on the review's day (usage prices); empty: unknown.",
    )
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.TextField(blank=True, default="")
    # Each tool call it made: {"tool", "arguments", "result" (cut), "is_error", "refused"}.
    steps = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["chat", "-created_at"], name="review_chat_created")]

    def __str__(self) -> str:
        return f"review #{self.pk} after turn {self.turn_number} ({self.status})"

    @property
    def origin_label(self) -> str:
        """How a proposal it made names its origin: "proposed by the review after turn 12"."""
        return f"proposed by the review after turn {self.turn_number}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class CuratorState(models.Model):
    """What the skills curator remembers between runs (one row, pk 1): when it first ran on
    this hub. A skill's idle time counts from then at the earliest, so switching the curator
    on (or upgrading to it) never archives months-old skills at once."""

    first_run_at = models.DateTimeField()
    last_run_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "curator state"
        verbose_name_plural = "curator state"

    def __str__(self) -> str:
        return f"curator, first run {self.first_run_at:%Y-%m-%d %H:%M}"
