"""Budget warnings: the people a cap concerns are told when recorded spend crosses 80 % of
it, and staff when it reaches 100 %, once per budget (per person for the default) and
calendar month (UTC).

Who is told:

- a person's own cap, or the default: at 80 % that person; at 100 % every active staff
  member (for the default: once per person it holds);
- a chat's cap: at 80 % the chat's owners and admins (people linked to it); at 100 % staff;
- the hub's cap: every active staff member, at 80 % and at 100 %.

How: `chats.deliveries.person_tell`, the way a schedule's owner hears of a failed run: in the
person's own private chat with the bot on Telegram when they linked one, else on their
dashboard (`PersonNotice`, kind "budget_warning").

When: every ledger record of model work (a turn, a scheduled run, a compression summary, a
review) is followed, once its transaction committed, by `budget_warnings_after_spend`: the
budgets that apply to it and their month's spend (the same reads as `budget_check`, the
same rules: a money cap counts priced spend only, so unpriced work never moves it), then,
for a level reached and not yet warned of, one `BudgetWarning` insert that the unique
constraints let only one transaction make; whoever made it tells the people, in the same
transaction (two workers recording at once warn once). Bounded: one query for the budgets,
one aggregate per budget, one for the warnings already made; nothing more below 80 %.
"""

import logging
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q

from budgets.models import Budget, BudgetWarning, Level, Scope
from budgets.selectors import CapSpend, applicable_budgets, caps_with_spend, month_bounds
from chats.deliveries import person_tell
from chats.models import ChatMember
from usage.models import NANOS
from usage.selectors import Spend, spend

logger = logging.getLogger(__name__)

NOTICE_KIND = "budget_warning"


@dataclass(frozen=True)
class Usage:
    """How far one budget's month is used, by the limit that is furthest along."""

    percent: int  # rounded down; may pass 100
    cap: str  # "200,000 tokens", "50.00 USD"
    used: str  # "170,000 tokens", "42.10 USD"
    unpriced_left_out: bool  # a money cap, with work of unpriced models not counted


def _tokens(count: int) -> str:
    return f"{count:,} {'token' if count == 1 else 'tokens'}"


def _money(nanos: int) -> str:
    amount = (Decimal(nanos) / NANOS).quantize(Decimal("0.01"))
    return f"{amount} {settings.USAGE_CURRENCY}"


def usage_of(budget: Budget, spent: Spend) -> Usage | None:
    """How far `spent` uses `budget` (the limit furthest along), or None when it has no cap.
    A tokens cap counts every token; a money cap the priced cost only (an unknown cost is
    never counted as 0 spent, nor guessed: it does not move a money cap)."""
    best: Usage | None = None
    if budget.monthly_tokens is not None:
        best = Usage(
            percent=_percent(spent.tokens, budget.monthly_tokens),
            cap=_tokens(budget.monthly_tokens),
            used=_tokens(spent.tokens),
            unpriced_left_out=False,
        )
    if budget.monthly_cost is not None:
        cap_nanos = int(budget.monthly_cost * NANOS)
        money = Usage(
            percent=_percent(spent.cost_nanos, cap_nanos),
            cap=_money(cap_nanos),
            used=_money(spent.cost_nanos),
            unpriced_left_out=bool(spent.unpriced_tokens or spent.unpriced_calls),
        )
        if best is None or money.percent > best.percent:
            best = money
    return best


def _percent(spent: int, cap: int) -> int:
    """Integer percent, rounded down; a cap of 0 is used up by anything (spent >= cap)."""
    if cap <= 0:
        return 100
    return spent * 100 // cap


def _maybe_reached(cap: CapSpend) -> bool:
    """Whether the cap's spend (as the check reads it) is at 80 % or more of a limit."""
    if cap.monthly_tokens is not None and (
        _percent(cap.spent_tokens, cap.monthly_tokens) >= Level.NEARLY
    ):
        return True
    return cap.monthly_cost is not None and (
        _percent(cap.spent_cost_nanos, int(cap.monthly_cost * NANOS)) >= Level.NEARLY
    )


def _levels(usage: Usage) -> list[int]:
    return [level for level in (Level.NEARLY, Level.USED_UP) if usage.percent >= level]


def budget_warnings_after_spend(
    *, person_id: int | None, chat_id: int | None, now: datetime
) -> list[BudgetWarning]:
    """Warn of every level newly reached by the budgets that apply to this work (attributed to
    `person_id` in `chat_id`) in `now`'s month; the warnings made here (none when another
    transaction made them first). Call it outside the transaction that recorded the spend."""
    start, end = month_bounds(now)
    # One statement first (the check's): most records leave every cap under 80 %, and then
    # nothing more is read. The ORM's reading below names what the warning says.
    if not any(_maybe_reached(cap) for cap in caps_with_spend(person_id, chat_id, start=start,
                                                                end=end)):  # fmt: skip
        return []
    budgets = applicable_budgets(person_id, chat_id)
    reached: list[tuple[Budget, int | None, Usage, int]] = []
    for budget in budgets:
        if budget.scope == Scope.PERSON:
            spent = spend(start=start, end=end, person_id=person_id)
        elif budget.scope == Scope.CHAT:
            spent = spend(start=start, end=end, chat_id=chat_id)
        else:
            spent = spend(start=start, end=end)
        usage = usage_of(budget, spent)
        if usage is None:
            continue
        subject = person_id if budget.scope == Scope.PERSON else None
        reached += [(budget, subject, usage, level) for level in _levels(usage)]
    if not reached:
        return []
    done = warned(start, {budget.pk for budget, *_ in reached}, person_id)
    made = []
    for budget, subject, usage, level in reached:
        if (budget.pk, subject, level) in done:
            continue
        warning = warn_once(
            budget=budget, subject_id=subject, usage=usage, level=level, month=start,
            resets_on=end,
        )  # fmt: skip
        if warning is not None:
            made.append(warning)
    return made


def warned(month: date, budget_ids: set[int], person_id: int | None) -> set[tuple]:
    """The (budget, person, level) warnings already made this month for these budgets (the
    person's, or the budget's own when it has no person)."""
    mine = Q(person__isnull=True)
    if person_id is not None:
        mine |= Q(person_id=person_id)
    rows = BudgetWarning.objects.filter(mine, month=month, budget_id__in=budget_ids)
    return set(rows.values_list("budget_id", "person_id", "level"))


def warn_once(
    *,
    budget: Budget,
    subject_id: int | None,
    usage: Usage,
    level: int,
    month: date,
    resets_on: date,
) -> BudgetWarning | None:
    """Record that `level` of `budget` (for `subject_id`) was reached this month and tell its
    people, in one transaction; None when that warning exists already (another transaction's
    insert won: it told them)."""
    with transaction.atomic():
        try:
            with transaction.atomic():  # a savepoint: the losing insert leaves the rest intact
                warning = BudgetWarning.objects.create(
                    budget=budget, person_id=subject_id, month=month, level=level, used=usage.used
                )
        except IntegrityError:
            return None
        people = _recipients(budget, subject_id, level)
        text = warning_text(
            budget=budget, subject=_person(subject_id), usage=usage, level=level,
            resets_on=resets_on,
        )  # fmt: skip
        for person in people:
            person_tell(person=person, text=text, kind=NOTICE_KIND)
        warning.told = len(people)
        warning.save(update_fields=["told"])
    return warning


def _staff() -> list:
    return list(get_user_model().objects.filter(is_active=True, is_staff=True).order_by("pk"))


def _recipients(budget: Budget, subject_id: int | None, level: int) -> list:
    """Who hears of `level`: staff at 100 %; at 80 % the capped person, a chat's owners and
    admins, or staff for the hub's cap."""
    if level == Level.USED_UP or budget.scope == Scope.HUB:
        return _staff()
    people = get_user_model().objects.filter(is_active=True)
    if budget.scope == Scope.PERSON:
        return list(people.filter(pk=subject_id)) if subject_id is not None else []
    roles = (ChatMember.Role.OWNER, ChatMember.Role.ADMIN)
    members = ChatMember.objects.filter(chat_id=budget.chat_id, role__in=roles)
    return list(people.filter(pk__in=members.values("person_id")).order_by("pk"))


def _person(person_id: int | None):
    if person_id is None:
        return None
    return get_user_model().objects.filter(pk=person_id).first()


def _chat_label(budget: Budget) -> str:
    chat = budget.chat
    return f"“{chat.title}”" if chat.title else chat.chat_key


def warning_text(*, budget: Budget, subject, usage: Usage, level: int, resets_on: date) -> str:
    """The warning as its people read it: which cap, how much is used, who set it, when it
    resets, and what happens past it."""
    setter = budget.set_by.get_username() if budget.set_by else ""
    resets = f"{resets_on.day} {resets_on:%B %Y}"
    used = f"{usage.used} this month"
    if usage.unpriced_left_out:
        used += " (work of models without a price is not counted: its cost is unknown)"
    if level == Level.USED_UP:
        return _staff_text(budget, subject, usage, setter, used, resets)
    set_by = f", set by {setter}," if setter else ""
    ask = f"ask {setter} or another staff member" if setter else "ask a staff member"
    if budget.scope == Scope.PERSON:
        whose = "Your monthly budget" if budget.person_id else "Your monthly budget (the default)"
        held = "you get no model replies"
    elif budget.scope == Scope.CHAT:
        whose = f"The monthly budget of your chat {_chat_label(budget)}"
        held = "nobody in that chat gets model replies"
    else:
        whose = "The hub's monthly budget"
        held = "nobody gets model replies"
        ask = "raise it in the admin (Budgets)"
    if usage.percent >= 100:
        return (
            f"{whose} of {usage.cap}{set_by} is used up: {used}. Until it resets on {resets}, "
            f"{held}: {ask} to raise it."
        )
    return (
        f"{whose} of {usage.cap}{set_by} is {usage.percent}% used: {used}. It resets on "
        f"{resets}; once it is used up, {held} until then: {ask} if more is needed."
    )


def _staff_text(budget, subject, usage, setter, used, resets) -> str:
    set_by = f" (set by {setter})" if setter else ""
    name = subject.get_username() if subject is not None else "someone"
    if budget.scope == Scope.PERSON and budget.person_id:
        what = f"{name}'s monthly budget of {usage.cap}{set_by} is used up"
        held = f"{name} gets no model replies"
    elif budget.scope == Scope.PERSON:
        what = f"{name} used up the default monthly budget per person of {usage.cap}{set_by}"
        held = f"{name} gets no model replies"
    elif budget.scope == Scope.CHAT:
        label = _chat_label(budget)
        what = f"the monthly budget of the chat {label} of {usage.cap}{set_by} is used up"
        held = "nobody in that chat gets model replies"
    else:
        what = f"the hub's monthly budget of {usage.cap}{set_by} is used up"
        held = "nobody gets model replies"
    return (
        f"Budget used up: {what}: {used}. Until it resets on {resets}, {held}. Raise it in the "
        "admin (Budgets) if that is not what you want."
    )


def budget_warnings_reset(*, budget: Budget, now: datetime) -> int:
    """Forget this month's warnings of a budget whose cap changed, so the people are told
    again against the new cap; how many."""
    start, _ = month_bounds(now)
    deleted, _ = BudgetWarning.objects.filter(budget=budget, month__gte=start).delete()
    return deleted
