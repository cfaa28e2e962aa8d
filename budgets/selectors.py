"""The budget check: is a monthly cap that applies to this work used up?

`budget_check` reads the budgets that apply (one query: the person's own or the default,
the chat's, the hub's) and, for each, what was spent in the calendar month (UTC) through
`usage.selectors.spend` (one indexed aggregate over the daily sums each). Nothing is
cached: the daily sums are exact at every commit, so each check sees every finished turn.

What counts:
- a **tokens** cap counts every prompt and completion token, priced or not;
- a **money** cap counts the **priced** spend only. Work of a model without a price has an
  unknown cost; it is never counted as 0 *and* never guessed: it cannot use up a money cap.
  A hub that runs unpriced models and wants them capped sets a tokens cap too (or a price).
- the running turn's own spend not yet in the ledger (`pending_*`) counts as well, so a
  long tool loop stops at the cap between its iterations.
A cap is used up when the spend reaches it (spent >= cap); a cap of 0 refuses everything.
"""

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Q

from budgets.models import Budget, Scope
from usage.models import NANOS
from usage.selectors import spend

CHECK_ORDER = {Scope.PERSON: 0, Scope.CHAT: 1, Scope.HUB: 2}


def month_bounds(now: datetime) -> tuple[date, date]:
    """The first day of `now`'s calendar month (UTC) and the first day of the next."""
    start = date(now.year, now.month, 1)
    end = date(now.year + 1, 1, 1) if now.month == 12 else date(now.year, now.month + 1, 1)
    return start, end


@dataclass(frozen=True)
class Refusal:
    """A used-up cap: which one, who set it, when it resets."""

    budget_id: int
    scope: str
    limit: str  # "tokens" or "money"
    cap: str  # the cap as people read it: "200,000 tokens", "50.00 USD"
    set_by: str  # the staff member's username, "" when unknown (deleted)
    resets_on: date

    @property
    def message(self) -> str:
        whose = {
            Scope.PERSON: "Your",
            Scope.CHAT: "This chat's",
            Scope.HUB: "The hub's",
        }[self.scope]
        setter = f", set by {self.set_by}," if self.set_by else ""
        ask = f"Ask {self.set_by} or another staff member" if self.set_by else "Ask a staff member"
        resets = f"{self.resets_on.day} {self.resets_on:%B %Y}"
        return (
            f"{whose} monthly budget of {self.cap}{setter} is used up; it resets on {resets}. "
            f"{ask} to raise it."
        )


def applicable_budgets(person_id: int | None, chat_id: int | None) -> list[Budget]:
    """The budgets that cap this work, person first, then chat, then hub; a person's own
    budget replaces the default."""
    where = Q(scope=Scope.HUB)
    if chat_id is not None:
        where |= Q(scope=Scope.CHAT, chat_id=chat_id)
    if person_id is not None:
        where |= Q(scope=Scope.PERSON, person_id=person_id)
        where |= Q(scope=Scope.PERSON, person__isnull=True)
    rows = list(Budget.objects.filter(where).select_related("set_by"))
    if any(row.scope == Scope.PERSON and row.person_id for row in rows):
        rows = [row for row in rows if not (row.scope == Scope.PERSON and not row.person_id)]
    return sorted(rows, key=lambda row: CHECK_ORDER[row.scope])


def budget_check(
    person_id: int | None,
    chat_id: int | None,
    *,
    now: datetime,
    pending_tokens: int = 0,
    pending_cost_nanos: int | None = 0,
) -> Refusal | None:
    """None when the work may go on; else the first used-up cap (person, chat, hub).
    `person_id` is who the work is attributed to (usage's rule; None: nobody, so only the
    chat's and the hub's caps apply). `pending_*`: the running turn's unrecorded spend
    (`pending_cost_nanos` None: unpriced, so it counts for tokens caps only)."""
    budgets = applicable_budgets(person_id, chat_id)
    if not budgets:
        return None
    start, end = month_bounds(now)
    for budget in budgets:
        if budget.scope == Scope.PERSON:
            spent = spend(start=start, end=end, person_id=person_id)
        elif budget.scope == Scope.CHAT:
            spent = spend(start=start, end=end, chat_id=chat_id)
        else:
            spent = spend(start=start, end=end)
        refusal = _used_up(budget, spent, pending_tokens, pending_cost_nanos or 0, end)
        if refusal is not None:
            return refusal
    return None


def _used_up(budget: Budget, spent, pending_tokens: int, pending_nanos: int, end: date):
    limit = cap = ""
    if budget.monthly_tokens is not None and spent.tokens + pending_tokens >= budget.monthly_tokens:
        unit = "token" if budget.monthly_tokens == 1 else "tokens"
        limit, cap = "tokens", f"{budget.monthly_tokens:,} {unit}"
    elif budget.monthly_cost is not None:
        cap_nanos = int(budget.monthly_cost * NANOS)
        if spent.cost_nanos + pending_nanos >= cap_nanos:
            amount = budget.monthly_cost.quantize(Decimal("0.01"))
            limit, cap = "money", f"{amount} {settings.USAGE_CURRENCY}"
    if not limit:
        return None
    return Refusal(
        budget_id=budget.pk,
        scope=budget.scope,
        limit=limit,
        cap=cap,
        set_by=budget.set_by.get_username() if budget.set_by else "",
        resets_on=end,
    )
