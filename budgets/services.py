"""Writes of the budgets app and its turn gate.

Only staff set budgets (`budget_save`, used by the admin, records who set it). The turn
gate (registered with the engine in `BudgetsConfig.ready`; chats never imports this app)
asks `budget_check` before a turn calls the model and between the iterations of its tool
loop, for whoever the turn's spend is attributed to (usage's rule)."""

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from budgets.models import Budget
from budgets.selectors import budget_check
from budgets.warnings import budget_warnings_reset
from chats.agent.registry import TurnContext, TurnSpend
from usage.prices import cost_nanos
from usage.services import attribution_of_trigger


def budget_save(*, budget: Budget, by) -> Budget:
    """Store a budget set by a staff member (anyone else is refused)."""
    if not (by and by.is_active and by.is_staff):
        raise PermissionDenied("Only staff set budgets.")
    budget.full_clean()
    before = None
    if budget.pk is not None:
        before = Budget.objects.filter(pk=budget.pk).values("monthly_tokens", "monthly_cost")
        before = before.first()
    budget.set_by = by
    with transaction.atomic():
        budget.save()
        caps = {"monthly_tokens": budget.monthly_tokens, "monthly_cost": budget.monthly_cost}
        if before is not None and before != caps:
            # A new cap: its people are told again when the spend crosses its levels.
            budget_warnings_reset(budget=budget, now=timezone.now())
    return budget


def budget_turn_gate(context: TurnContext, pending: TurnSpend) -> str | None:
    """The answer that ends the turn when a cap is used up, else None."""
    now = timezone.now()
    person_id = attribution_of_trigger(context.trigger.pk).person_id
    tokens = pending.prompt_tokens + pending.completion_tokens
    nanos = 0
    if tokens:
        nanos = cost_nanos(pending.model, now.date(), pending.prompt_tokens,
                           pending.completion_tokens)  # fmt: skip
    refusal = budget_check(
        person_id, context.chat.pk, now=now, pending_tokens=tokens, pending_cost_nanos=nanos
    )
    return refusal.message if refusal else None
