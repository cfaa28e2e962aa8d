"""Writes of the budgets app, its turn gate and its review gate.

Only staff set budgets (`budget_save`, used by the admin, records who set it). The turn
gate (registered with the engine in `BudgetsConfig.ready`; chats never imports this app)
asks `budget_check` before a turn calls the model and between the iterations of its tool
loop, for whoever the turn's spend is attributed to (usage's rule). The review gate
(registered with `learning.gates`; learning never imports this app) asks it before a
background review calls the model, for whoever the review's spend is attributed to.

What one check costs: with no budget at all, one probe of the budgets table. Otherwise one
statement (`turn_budget_check`: the caps, their month's spend and the price of the
turn's unrecorded tokens), and at the first check of a run also who spends (from the loaded
trigger and actor: a scheduled run's payer is stored in its trigger's metadata; one query
for a trigger loaded without its actor) and the probe, unless the process's last read found
budgets.
Who spends is kept for the run on the trigger the runner loaded (a resumed turn loads it
anew); the spend and the budgets are never cached, so every check sees every finished turn
and every budget saved or deleted before it. Within the last mile of a cap the gate also
takes (or renews) the cap's last-mile claim: one Redis call (`budgets.lastmile`)."""

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from budgets.lastmile import claim, claim_key
from budgets.models import Budget, Scope
from budgets.selectors import (
    CapSpend,
    Refusal,
    TurnCheck,
    budget_check,
    budgets_exist,
    budgets_found_last,
    cap_text,
    cap_used_percent,
    setter_name,
    turn_budget_check,
)
from budgets.warnings import budget_warnings_reset
from chats.agent.registry import TurnContext, TurnSpend
from learning.gates import ReviewStart
from usage.services import (
    SCHEDULE_NAMESPACE,
    actor_spender,
    attribution_of_trigger,
    schedule_owner,
    stored_payer,
)

# The attribute of the turn's loaded trigger Message that keeps its attributed person id.
_ATTRIBUTED = "_budgets_attributed_person_id"


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
    kept = context.trigger.__dict__
    if _ATTRIBUTED in kept:
        person_id = kept[_ATTRIBUTED]
    else:
        # The probe spares reading who spends (and the statement) when no budget exists.
        # Skipped while this process's last read found budgets: that changes only what is
        # read, never the answer (the statement reads the budgets that apply anyway).
        if not budgets_found_last() and not budgets_exist():
            return None  # asked again at the next check: a budget set meanwhile is seen there
        # One run's trigger (so who spends) does not change between its iterations.
        person_id = kept[_ATTRIBUTED] = _attributed_person_id(context)
    check = turn_budget_check(
        person_id,
        context.chat.pk,
        now=timezone.now(),
        model=pending.model,
        prompt_tokens=pending.prompt_tokens,
        completion_tokens=pending.completion_tokens,
    )
    if check.refusal:
        return check.refusal.message
    if check.last_mile and context.turn is not None and context.turn.pk:
        return _claim_last_mile(check, person_id, context.turn.pk)
    return None


def _claim_last_mile(check: TurnCheck, person_id: int | None, turn_id: int) -> str | None:
    """Near a cap, only the turn holding its last-mile claim may call the model (see
    `budgets.lastmile`); another gets an answer saying so (its message is kept)."""
    for cap in check.last_mile:
        # The default budget caps each person on their own: one claim per person.
        subject = person_id if cap.scope == Scope.PERSON and cap.person_id is None else None
        if not claim(claim_key(cap.budget_id, subject, check.month), turn_id):
            return last_mile_answer(cap, check.resets_on)
    return None


def last_mile_answer(cap: CapSpend, resets_on) -> str:
    """The answer of a turn that found another holding the last of a cap."""
    whose = {Scope.PERSON: "Your", Scope.CHAT: "This chat's", Scope.HUB: "The hub's"}[cap.scope]
    amount = cap_text(cap, "tokens" if cap.monthly_tokens is not None else "money")
    setter = setter_name(cap.set_by_id)
    set_by = f", set by {setter}," if setter else ""
    ask = f"ask {setter} or another staff member" if setter else "ask a staff member"
    resets = f"{resets_on.day} {resets_on:%B %Y}"
    return (
        f"{whose} monthly budget of {amount}{set_by} is almost used up "
        f"({cap_used_percent(cap, 0, 0)} %), and another reply is using what is left of it. "
        f"Send your message again once that reply is finished; the budget resets on {resets} "
        f"(or {ask} to raise it)."
    )


def budget_review_gate(start: ReviewStart) -> str | None:
    """Why a background review does not run (a cap that applies to its spend is used up),
    else None. Its spend is attributed like the turn it follows (usage's rule)."""
    person_id = attribution_of_trigger(start.trigger_id).person_id
    refusal = budget_check(person_id, start.chat_id, now=timezone.now())
    return review_reason(refusal) if refusal else None


def review_reason(refusal: Refusal) -> str:
    """The reason a skipped review records, for whoever may read the chat's reviews: a
    person's cap is not spelled out there (it is theirs, not the chat's)."""
    resets = f"{refusal.resets_on.day} {refusal.resets_on:%B %Y}"
    set_by = f", set by {refusal.set_by}," if refusal.set_by else ""
    if refusal.scope == Scope.PERSON:
        what = "the monthly budget of the person whose turn it follows is used up"
    elif refusal.scope == Scope.CHAT:
        what = f"this chat's monthly budget of {refusal.cap}{set_by} is used up"
    else:
        what = f"the hub's monthly budget of {refusal.cap}{set_by} is used up"
    return f"{what}; it resets on {resets}. The next review that runs reads these turns too."


def _attributed_person_id(context: TurnContext) -> int | None:
    """Who the turn's spend is attributed to (`usage.services.attribution_of_trigger`), as a
    person id, from the trigger and the actor the runner loaded, without a query: for a
    scheduled run, the payer its trigger names (fixed when the run started; its schedule's
    owner now, one query, for a trigger stored before payers were); else the actor's
    linked person, the owner of the integration token an unlinked API user speaks through,
    or nobody (`usage.services.actor_spender`). A trigger loaded without its actor asks
    usage's rule."""
    actor, trigger = context.actor, context.trigger
    if actor is None or actor.pk != trigger.actor_id:
        return attribution_of_trigger(trigger.pk).person_id
    metadata = trigger.metadata if isinstance(trigger.metadata, dict) else {}
    if actor.namespace == SCHEDULE_NAMESPACE and metadata.get("schedule"):
        payer = stored_payer(metadata)
        return payer if payer is not None else schedule_owner(metadata["schedule"])
    return actor_spender(actor.person_id, actor.namespace)
