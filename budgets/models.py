"""Monthly caps on usage, set by staff.

A **Budget** caps the spend of one calendar month (UTC) in tokens, in money (the hub's
currency, `USAGE_CURRENCY`), or both, for a person, a chat or the whole hub. The per-person
**default** is a budget of scope person with no person; a budget for one person
**overrides** it. At most one budget per person, per chat, one default and one for the hub.
See docs/BUDGETS.md.
"""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Scope(models.TextChoices):
    PERSON = "person", "Person (no person: the default for everyone)"
    CHAT = "chat", "Chat"
    HUB = "hub", "Whole hub"


class Budget(models.Model):
    scope = models.CharField(max_length=8, choices=Scope.choices)
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="budgets",
        help_text="Scope person only; empty: the default for every person without their own.",
    )
    chat = models.ForeignKey(
        "chats.Chat", on_delete=models.CASCADE, null=True, blank=True, related_name="budgets"
    )
    monthly_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Prompt plus completion tokens per calendar month (UTC)."
    )
    monthly_cost = models.DecimalField(
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Money per calendar month in the hub's currency; counts priced spend only.",
    )
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="budgets_set",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["person"], condition=Q(scope="person"), name="budget_one_per_person"
            ),
            models.UniqueConstraint(
                fields=["scope"],
                condition=Q(scope="person", person__isnull=True) | Q(scope="hub"),
                name="budget_one_default_and_one_hub",
            ),
            models.UniqueConstraint(
                fields=["chat"], condition=Q(scope="chat"), name="budget_one_per_chat"
            ),
        ]

    def __str__(self) -> str:
        if self.scope == Scope.HUB:
            return "Hub budget"
        if self.scope == Scope.CHAT:
            return f"Budget of chat {self.chat_id}"
        return f"Budget of {self.person}" if self.person_id else "Default budget per person"

    def clean(self) -> None:
        if self.monthly_tokens is None and self.monthly_cost is None:
            raise ValidationError("Set a monthly cap in tokens, in money, or both.")
        if self.scope != Scope.PERSON and self.person_id:
            raise ValidationError({"person": "Only a budget of scope person names a person."})
        if self.scope == Scope.CHAT and not self.chat_id:
            raise ValidationError({"chat": "A chat budget names its chat."})
        if self.scope != Scope.CHAT and self.chat_id:
            raise ValidationError({"chat": "Only a budget of scope chat names a chat."})


class Level(models.IntegerChoices):
    NEARLY = 80, "80 % used"
    USED_UP = 100, "used up"


class BudgetWarning(models.Model):
    """That the people a cap concerns were told it crossed a level (80 %: the person it
    caps; 100 %: staff), once per budget, subject and calendar month: the unique
    constraints make a second, concurrent warning an insert that fails, never a second
    notice. See budgets.warnings."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="warnings")
    # The person a person budget capped (the default is one budget for many people: one
    # warning each); empty for a chat's and the hub's budget.
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
    )
    month = models.DateField(help_text="The first day of the calendar month (UTC).")
    level = models.PositiveSmallIntegerField(choices=Level.choices)
    used = models.CharField(max_length=64, help_text="What was spent when it was told.")
    told = models.PositiveIntegerField(default=0, help_text="How many people were told.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "person", "month", "level"],
                condition=Q(person__isnull=False),
                name="budget_warning_once_per_person",
            ),
            models.UniqueConstraint(
                fields=["budget", "month", "level"],
                condition=Q(person__isnull=True),
                name="budget_warning_once",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget} {self.get_level_display()} in {self.month:%Y-%m}"
