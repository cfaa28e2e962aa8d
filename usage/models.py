"""Prices, the usage ledger and its daily sums.

**ModelPrice** is what a model costs per million prompt and completion tokens from a day
on; the price of a call is the one whose `valid_from` is the latest on or before the call's
day (UTC). **UsageRecord** is the ledger: one row per stored piece of model or tool work (a
turn's model calls up to a stop, a compression summary, a review, a tool call), attributed
once, when recorded, to a person (or none) and a chat (or none). **UsageDay** holds the
ledger's sums per (day, person, chat, model, kind); it is updated in the transaction that
writes each record, so it is always exact, and `manage.py usage_rebuild` recomputes it.
**UsageHubDay** holds the same sums per (day, model, kind) for the whole hub, kept the same
way: the hub-wide pages (by day, model or kind, the chart, the totals) read tens of rows a
day there instead of one per (person, chat) pair. **UsagePersonDay** and **UsageChatDay**
hold them per (day, person) and per (day, chat), every model and kind together, kept the
same way: a staff table by person or by chat (or a page narrowed to one person or chat)
without a model or kind filter reads a row per person or chat a day there.

Costs are integers in billionths of the hub's currency (`USAGE_CURRENCY`): sums of
integers are exact on every database, where sums of decimals on SQLite are floats.
See docs/USAGE.md.
"""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

NANOS = Decimal(1_000_000_000)


def utc_today():
    return timezone.now().date()


def hub_currency() -> str:
    return settings.USAGE_CURRENCY


class Kind(models.TextChoices):
    TURN = "turn", "Turns"
    SCHEDULED = "scheduled", "Scheduled runs"
    REVIEW = "review", "Reviews"
    COMPRESSION = "compression", "Compression summaries"
    VISION = "vision", "Image descriptions"
    TOOL = "tool", "Tool calls"
    TRANSCRIPTION = "transcription", "Transcriptions"
    # Documents' text read by the hub itself (attachments): `calls` counts the pages read,
    # `duration_ms` the reading time; no model, no tokens, no money.
    EXTRACTION = "extraction", "Pages extracted"


# Work that costs no money: never priced, and never counted as "unpriced" (no price missing).
NOT_PRICED = (Kind.TOOL, Kind.EXTRACTION)


class ModelPrice(models.Model):
    """What one model costs per million tokens from `valid_from` (a UTC day) on."""

    model = models.CharField(max_length=255, db_index=True)
    input_per_million = models.DecimalField(
        "price per million prompt tokens", max_digits=12, decimal_places=6
    )
    output_per_million = models.DecimalField(
        "price per million completion tokens", max_digits=12, decimal_places=6
    )
    currency = models.CharField(max_length=3, default=hub_currency)
    valid_from = models.DateField("applies from (UTC day)", default=utc_today)
    note = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["model", "-valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["model", "valid_from"], name="model_price_once_a_day")
        ]

    def __str__(self) -> str:
        return (
            f"{self.model}: {self.input_per_million} / {self.output_per_million} "
            f"{self.currency} per M tokens from {self.valid_from}"
        )

    def clean(self) -> None:
        # Sums over the hub add costs of every model: they only mean something in one currency.
        if self.currency != settings.USAGE_CURRENCY:
            raise ValidationError(
                {"currency": f"Prices are kept in the hub's currency, {settings.USAGE_CURRENCY}."}
            )
        if self.input_per_million is not None and self.input_per_million < 0:
            raise ValidationError({"input_per_million": "A price cannot be negative."})
        if self.output_per_million is not None and self.output_per_million < 0:
            raise ValidationError({"output_per_million": "A price cannot be negative."})

    # Prices have 6 decimals, so a price in millionths is an integer, and the cost of n
    # tokens in billionths is n × price_micros / 1000: integer arithmetic, the same in Python
    # and in SQL (a reprice computes it in the database).
    @property
    def input_micros(self) -> int:
        return int(self.input_per_million * 1_000_000)

    @property
    def output_micros(self) -> int:
        return int(self.output_per_million * 1_000_000)

    def cost_nanos(self, prompt_tokens: int, completion_tokens: int) -> int:
        """The cost of these tokens in billionths of the currency, rounded half up."""
        total = prompt_tokens * self.input_micros + completion_tokens * self.output_micros
        return (total + 500) // 1000


class UsageRecord(models.Model):
    """One stored piece of work: tokens (and cost when priced) or one timed tool call."""

    at = models.DateTimeField(default=timezone.now)
    day = models.DateField()  # `at`'s UTC day, kept so sums group without date functions
    kind = models.CharField(max_length=16, choices=Kind.choices)
    model = models.CharField(max_length=255, blank=True, default="")
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    chat = models.ForeignKey(
        "chats.Chat", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    turn = models.ForeignKey(
        "chats.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    review = models.ForeignKey(
        "learning.Review", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    calls = models.PositiveIntegerField(default=1)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # None: the model had no price on `day` (shown as unknown, never as zero). Tool calls
    # are not priced and carry no tokens: always None.
    cost_nanos = models.BigIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    # Audio transcribed (kind "transcription"): a unit of its own, never tokens; priced per
    # minute by the engine that transcribed it (voice.accounting), the local one free.
    audio_ms = models.PositiveBigIntegerField(null=True, blank=True)
    detail = models.CharField(max_length=255, blank=True, default="")  # e.g. the tool's name

    class Meta:
        ordering = ["-day", "-id"]
        indexes = [
            models.Index(fields=["day", "id"], name="usage_record_day_idx"),
            models.Index(fields=["person", "day"], name="usage_record_person_day_idx"),
            models.Index(fields=["chat", "day"], name="usage_record_chat_day_idx"),
            models.Index(fields=["model", "day"], name="usage_record_model_day_idx"),
            models.Index(fields=["turn"], name="usage_record_turn_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} usage #{self.pk} on {self.day}"

    @property
    def cost(self) -> Decimal | None:
        return None if self.cost_nanos is None else Decimal(self.cost_nanos) / NANOS


SUM_COLUMNS = ["calls", "prompt_tokens", "completion_tokens", "cost_nanos", "unpriced_tokens",
               "unpriced_calls", "duration_ms", "audio_ms"]  # fmt: skip


class UsageDay(models.Model):
    """The ledger's sums for one (UTC day, person, chat, model, kind); exact at every commit."""

    day = models.DateField()
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # an index below leads with it
    )
    chat = models.ForeignKey(
        "chats.Chat",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    model = models.CharField(max_length=255, blank=True, default="")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The unique key of the five above: NULLs are distinct in a unique constraint on SQLite
    # (and by default on PostgreSQL), so the key is spelled out in one text column.
    slot = models.CharField(max_length=400, unique=True)
    calls = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0)  # of the priced calls only
    unpriced_calls = models.PositiveBigIntegerField(default=0)
    unpriced_tokens = models.PositiveBigIntegerField(default=0)
    duration_ms = models.PositiveBigIntegerField(default=0)
    audio_ms = models.PositiveBigIntegerField(default=0, db_default=0)

    class Meta:
        ordering = ["-day"]
        indexes = [
            # Covering: a page over a range of days groups and sums from the index alone
            # (no table row is read), on SQLite and PostgreSQL (index-only scan) alike.
            models.Index(
                fields=[
                    "day",
                    "person",
                    "chat",
                    "model",
                    "kind",
                    "calls",
                    "prompt_tokens",
                    "completion_tokens",
                    "cost_nanos",
                    "unpriced_tokens",
                    "unpriced_calls",
                    "duration_ms",
                ],
                name="usage_day_sums_idx",
            ),  # fmt: skip
            # Covering too, for one person's rows and for some chats' rows (a person's page
            # reads their scope as those two; `spend` of a person or a chat): read from the
            # index alone, where (person, day) or (chat, day) read a table row per entry,
            # scattered over the table (tens of ms for a person's year on PostgreSQL).
            models.Index(
                fields=["person", "day", "chat", "model", "kind", *SUM_COLUMNS],
                name="usage_day_person_sums_idx",
            ),
            models.Index(
                fields=["chat", "day", "person", "model", "kind", *SUM_COLUMNS],
                name="usage_day_chat_sums_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} usage on {self.day} ({self.slot})"


class UsageHubDay(models.Model):
    """The whole hub's sums for one (UTC day, model, kind): UsageDay without the person and
    the chat, exact at every commit (written in the same transaction as each record)."""

    day = models.DateField()
    model = models.CharField(max_length=255, blank=True, default="")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    calls = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0)  # of the priced calls only
    unpriced_calls = models.PositiveBigIntegerField(default=0)
    unpriced_tokens = models.PositiveBigIntegerField(default=0)
    duration_ms = models.PositiveBigIntegerField(default=0)
    audio_ms = models.PositiveBigIntegerField(default=0, db_default=0)

    class Meta:
        ordering = ["-day"]
        constraints = [
            # No column of the key is NULL, so a plain unique constraint is the key (and its
            # index serves the pages' range of days).
            models.UniqueConstraint(fields=["day", "model", "kind"], name="usage_hub_day_once")
        ]

    def __str__(self) -> str:
        return f"{self.kind} usage of {self.model or '(no model)'} on {self.day}"


class _DaySums(models.Model):
    """The sums every table of daily sums holds."""

    day = models.DateField()
    calls = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0)  # of the priced calls only
    unpriced_calls = models.PositiveBigIntegerField(default=0)
    unpriced_tokens = models.PositiveBigIntegerField(default=0)
    duration_ms = models.PositiveBigIntegerField(default=0)
    audio_ms = models.PositiveBigIntegerField(default=0, db_default=0)

    class Meta:
        abstract = True


class UsagePersonDay(_DaySums):
    """One person's sums for one UTC day, every chat, model and kind together (None: the
    spend of no person); exact at every commit (written with each record's UsageDay row)."""

    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # an index below leads with it
    )
    # "<day>|<person id or ''>": unique whatever the NULLs (as UsageDay.slot); a deleted
    # person's rows keep theirs, so they never collide with the day's row of no person.
    slot = models.CharField(max_length=40, unique=True)

    class Meta:
        ordering = ["-day"]
        indexes = [
            # Covering, as UsageDay's: a range of days groups from the index alone.
            models.Index(fields=["day", "person", *SUM_COLUMNS], name="usage_person_day_sums_idx"),
            models.Index(fields=["person", "day"], name="usage_person_day_person_idx"),
        ]

    def __str__(self) -> str:
        return f"usage on {self.day} ({self.slot})"


class UsageChatDay(_DaySums):
    """One chat's sums for one UTC day, every person, model and kind together (None: work
    of no chat); exact at every commit (written with each record's UsageDay row)."""

    chat = models.ForeignKey(
        "chats.Chat",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    slot = models.CharField(max_length=40, unique=True)  # "<day>|<chat id or ''>"

    class Meta:
        ordering = ["-day"]
        indexes = [
            models.Index(fields=["day", "chat", *SUM_COLUMNS], name="usage_chat_day_sums_idx"),
            models.Index(fields=["chat", "day"], name="usage_chat_day_chat_idx"),
        ]

    def __str__(self) -> str:
        return f"usage on {self.day} ({self.slot})"


def owner_slot(day, owner_id: int | None) -> str:
    """The key of a UsagePersonDay or UsageChatDay row."""
    return f"{day.isoformat()}|{owner_id or ''}"


def day_slot(day, person_id: int | None, chat_id: int | None, model: str, kind: str) -> str:
    return f"{day.isoformat()}|{person_id or ''}|{chat_id or ''}|{kind}|{model}"
