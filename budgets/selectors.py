"""The budget check: is a monthly cap that applies to this work used up?

`budget_check` reads, in **one SQL statement**, the budgets that apply (the person's own or
the default, the chat's, the hub's) and, beside each, what its scope spent in the calendar
month (UTC) from usage's daily sums: per scope that applies, one indexed aggregate (the
person's and the chat's month over UsageDay, the hub's over UsageHubDay) joined to that
scope's budgets, the scopes put together by UNION ALL. Nothing is cached: the daily sums are
exact at every commit, so each check sees every finished turn and every budget saved or
deleted before it, and one statement reads one consistent state.
`budget_check_unrecorded` is the same check for a running turn whose unrecorded tokens are
priced at the day's price, read in the same statement.

What counts:
- a **tokens** cap counts every prompt and completion token, priced or not;
- a **money** cap counts the **priced** spend only. Work of a model without a price has an
  unknown cost; it is never counted as 0 *and* never guessed: it cannot use up a money cap.
  A hub that runs unpriced models and wants them capped sets a tokens cap too (or a price).
- the running turn's own spend not yet in the ledger (`pending_*`) counts as well, so a
  long tool loop stops at the cap between its iterations.
A cap is used up when the spend reaches it (spent >= cap); a cap of 0 refuses everything.

The statement is plain SQL run through Django's cursor (the ORM's cost per query was most
of the check's cost); every value is a bound parameter and every table and column name
comes from the models' metadata. `tests/budgets/test_check_query.py` holds it equal to
`usage.selectors.spend` and to the ORM's reading of budgets and prices.
"""

from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Context, Decimal
from functools import lru_cache

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Q

from budgets.lastmile import in_last_mile
from budgets.models import Budget, Scope
from usage.models import NANOS, ModelPrice, UsageDay, UsageHubDay

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


@dataclass(frozen=True)
class CapSpend:
    """A budget that applies and what its scope spent in the month (tokens, priced cost)."""

    budget_id: int
    scope: str
    person_id: int | None  # scope person: the person, or None for the default
    monthly_tokens: int | None
    monthly_cost: Decimal | None
    set_by_id: int | None  # who set it (None: deleted)
    spent_tokens: int
    spent_cost_nanos: int


def applicable_budgets(person_id: int | None, chat_id: int | None) -> list[Budget]:
    """The budgets that cap this work, person first, then chat, then hub; a person's own
    budget replaces the default. (The ORM's reading; the check's statement reads the same.)"""
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


def caps_with_spend(
    person_id: int | None, chat_id: int | None, *, start: date, end: date
) -> list[CapSpend]:
    """The budgets that apply (as `applicable_budgets`) with their scope's spend from
    `start` to before `end`: one SQL statement."""
    caps, _ = _read(person_id, chat_id, start, end, None, None)
    return caps


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
    start, end = month_bounds(now)
    caps, _ = _read(person_id, chat_id, start, end, None, None)
    return _first_used_up(caps, pending_tokens, pending_cost_nanos or 0, end)


def money_budget_check(
    person_id: int | None, chat_id: int | None, *, now: datetime, pending_cost_nanos: int
) -> Refusal | None:
    """`budget_check` for work priced in money alone, not in tokens (a paid transcription:
    its audio seconds are no tokens, so tokens caps do not apply): the first money cap that
    this work's `pending_cost_nanos` would reach, else None."""
    start, end = month_bounds(now)
    caps, _ = _read(person_id, chat_id, start, end, None, None)
    money = [replace(cap, monthly_tokens=None) for cap in caps if cap.monthly_cost is not None]
    return _first_used_up(money, 0, pending_cost_nanos, end)


def budget_check_unrecorded(
    person_id: int | None,
    chat_id: int | None,
    *,
    now: datetime,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> Refusal | None:
    """`budget_check` for a running turn whose tokens on `model` are not in the ledger yet:
    they count for tokens caps, and at `model`'s price on `now`'s day for money caps (none
    when unpriced: `usage.prices.cost_nanos`'s rule). One SQL statement."""
    return turn_budget_check(
        person_id,
        chat_id,
        now=now,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    ).refusal


@dataclass(frozen=True)
class TurnCheck:
    """What a running turn's check found: the first used-up cap (or None), and the caps it
    may still spend whose spend is within their last mile (`budgets.lastmile`)."""

    refusal: Refusal | None
    last_mile: list[CapSpend]
    month: date  # the first day of the month checked
    resets_on: date


def turn_budget_check(
    person_id: int | None,
    chat_id: int | None,
    *,
    now: datetime,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> TurnCheck:
    """`budget_check_unrecorded`, also naming the caps in their last mile. One statement."""
    start, end = month_bounds(now)
    tokens = prompt_tokens + completion_tokens
    priced = (model, now.date()) if tokens and model else (None, None)
    caps, price = _read(person_id, chat_id, start, end, *priced)
    nanos = price.cost_nanos(prompt_tokens, completion_tokens) if price is not None else 0
    refusal = _first_used_up(caps, tokens, nanos, end)
    near = [] if refusal else [cap for cap in caps if _in_last_mile(cap, tokens, nanos)]
    return TurnCheck(refusal=refusal, last_mile=near, month=start, resets_on=end)


def cap_used_percent(cap: CapSpend, pending_tokens: int, pending_nanos: int) -> int:
    """How much of the cap is used, in whole percent (the larger of its two limits)."""
    used = 0
    if cap.monthly_tokens:
        used = (cap.spent_tokens + pending_tokens) * 100 // cap.monthly_tokens
    if cap.monthly_cost:
        cap_nanos = int(cap.monthly_cost * NANOS)
        used = max(used, (cap.spent_cost_nanos + pending_nanos) * 100 // cap_nanos)
    return used


def _in_last_mile(cap: CapSpend, pending_tokens: int, pending_nanos: int) -> bool:
    if cap.monthly_tokens is not None and in_last_mile(
        cap.monthly_tokens, cap.spent_tokens + pending_tokens
    ):
        return True
    return cap.monthly_cost is not None and in_last_mile(
        int(cap.monthly_cost * NANOS), cap.spent_cost_nanos + pending_nanos
    )


def budgets_exist() -> bool:
    """Whether any budget is set at all (one indexed probe; none: nothing to check)."""
    table = connection.ops.quote_name(Budget._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} LIMIT 1")
        found = cursor.fetchone() is not None
    _remember(found)
    return found


def budgets_found_last() -> bool:
    """Whether this process's last read of budgets (a check or `budgets_exist`) found any.
    A hint for what to read first, never an answer: it may be stale the moment it is read."""
    return _found_last


_found_last = False


def _remember(found: bool) -> None:
    global _found_last
    _found_last = found


# --- the statement ---------------------------------------------------------------------------


def _read(
    person_id: int | None,
    chat_id: int | None,
    start: date,
    end: date,
    model: str | None,
    day: date | None,
) -> tuple[list[CapSpend], ModelPrice | None]:
    """The caps that apply with their spend, and `model`'s price on `day` (when asked and
    some cap applies), in one statement."""
    sql, params = check_query(person_id, chat_id, start, end, model, day)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    _remember(bool(rows))
    cost_field = Budget._meta.get_field("monthly_cost")
    caps = [
        CapSpend(
            budget_id=row[0],
            scope=row[1],
            person_id=row[2],
            monthly_tokens=row[3],
            monthly_cost=_decimal(row[4], cost_field),
            set_by_id=row[5],
            spent_tokens=int(row[6]),
            spent_cost_nanos=int(row[7]),
        )
        for row in rows
    ]
    if any(cap.scope == Scope.PERSON and cap.person_id for cap in caps):
        caps = [cap for cap in caps if not (cap.scope == Scope.PERSON and not cap.person_id)]
    caps.sort(key=lambda cap: CHECK_ORDER[cap.scope])
    price = None
    if model is not None and rows and rows[0][8] is not None:
        fields = ModelPrice._meta
        price = ModelPrice(
            model=model,
            input_per_million=_decimal(rows[0][8], fields.get_field("input_per_million")),
            output_per_million=_decimal(rows[0][9], fields.get_field("output_per_million")),
        )
    return caps, price


def check_query(
    person_id: int | None,
    chat_id: int | None,
    start: date,
    end: date,
    model: str | None = None,
    day: date | None = None,
) -> tuple[str, list]:
    """The check's statement and its parameters (also for the bench's query plan)."""
    sql = _statement(connection.vendor, person_id is not None, chat_id is not None,
                     model is not None)  # fmt: skip
    ops = connection.ops
    month = [ops.adapt_datefield_value(start), ops.adapt_datefield_value(end)]
    params: list = []
    if person_id is not None:
        params += [person_id, *month, Scope.PERSON.value, person_id]
    if chat_id is not None:
        params += [chat_id, *month, Scope.CHAT.value, chat_id]
    params += [*month, Scope.HUB.value]
    if model is not None:
        params += [model, ops.adapt_datefield_value(day)]
    return sql, params


@lru_cache(maxsize=32)
def _statement(vendor: str, with_person: bool, with_chat: bool, with_price: bool) -> str:
    """The SQL of one check, built once per shape and database (`vendor` keys the cache;
    the values are bound): per scope that applies, its budgets beside one aggregate of its
    month (UNION ALL), and the price of the turn's model beside every row."""
    q = connection.ops.quote_name
    budget = Budget._meta

    def col(meta, name: str) -> str:
        return q(meta.get_field(name).column)

    budget_columns = ", ".join(
        f"b.{column}"
        for column in (
            q(budget.pk.column),
            col(budget, "scope"),
            col(budget, "person"),
            col(budget, "monthly_tokens"),
            col(budget, "monthly_cost"),
            col(budget, "set_by"),
        )
    )

    def scope_rows(sums, key: str | None, where: str) -> str:
        keyed = f"{col(sums, key)} = %s AND " if key else ""
        tokens = f"{col(sums, 'prompt_tokens')} + {col(sums, 'completion_tokens')}"
        month = (
            f"SELECT COALESCE(SUM({tokens}), 0) AS tokens, "
            f"COALESCE(SUM({col(sums, 'cost_nanos')}), 0) AS nanos FROM {q(sums.db_table)} "
            f"WHERE {keyed}{col(sums, 'day')} >= %s AND {col(sums, 'day')} < %s"
        )
        return (
            f"SELECT {budget_columns}, s.tokens, s.nanos FROM {q(budget.db_table)} b "
            f"CROSS JOIN ({month}) s WHERE b.{col(budget, 'scope')} = %s{where}"
        )

    person = f"b.{col(budget, 'person')}"
    branches = []
    if with_person:  # the person's own budget and the default (the own one wins, in Python)
        where = f" AND ({person} = %s OR {person} IS NULL)"
        branches.append(scope_rows(UsageDay._meta, "person", where))
    if with_chat:
        branches.append(scope_rows(UsageDay._meta, "chat", f" AND b.{col(budget, 'chat')} = %s"))
    branches.append(scope_rows(UsageHubDay._meta, None, ""))
    sql = " UNION ALL ".join(branches)
    if not with_price:
        return sql
    price = ModelPrice._meta
    return (
        f"SELECT c.*, p.{col(price, 'input_per_million')}, p.{col(price, 'output_per_million')} "
        f"FROM ({sql}) c LEFT JOIN (SELECT {col(price, 'input_per_million')}, "
        f"{col(price, 'output_per_million')} FROM {q(price.db_table)} "
        f"WHERE {col(price, 'model')} = %s AND {col(price, 'valid_from')} <= %s "
        f"ORDER BY {col(price, 'valid_from')} DESC LIMIT 1) p ON 1 = 1"
    )


def setter_name(user_id: int | None) -> str:
    """The username of who set a budget ("" when they were deleted): one query."""
    if user_id is None:
        return ""
    user = get_user_model()
    name = user.objects.filter(pk=user_id).values_list(user.USERNAME_FIELD, flat=True).first()
    return name or ""


# SQLite keeps decimals as floats of 15 significant digits (the ORM reads them the same way).
_FIFTEEN_DIGITS = Context(prec=15)


def _decimal(value, field) -> Decimal | None:
    """A decimal column's value as the ORM reads it: a Decimal with the field's places."""
    if value is None:
        return None
    if isinstance(value, float):
        value = _FIFTEEN_DIGITS.create_decimal_from_float(value)
    return Decimal(value).quantize(Decimal(1).scaleb(-field.decimal_places), context=field.context)


def cap_text(cap: CapSpend, limit: str) -> str:
    """A cap as people read it: "200,000 tokens", "50.00 USD"."""
    if limit == "tokens":
        unit = "token" if cap.monthly_tokens == 1 else "tokens"
        return f"{cap.monthly_tokens:,} {unit}"
    return f"{cap.monthly_cost.quantize(Decimal('0.01'))} {settings.USAGE_CURRENCY}"


def _first_used_up(caps: list[CapSpend], pending_tokens: int, pending_nanos: int, end: date):
    for cap in caps:
        refusal = _used_up(cap, pending_tokens, pending_nanos, end)
        if refusal is not None:
            return refusal
    return None


def _used_up(cap: CapSpend, pending_tokens: int, pending_nanos: int, end: date):
    limit = text = ""
    if cap.monthly_tokens is not None and cap.spent_tokens + pending_tokens >= cap.monthly_tokens:
        limit, text = "tokens", cap_text(cap, "tokens")
    elif cap.monthly_cost is not None:
        cap_nanos = int(cap.monthly_cost * NANOS)
        if cap.spent_cost_nanos + pending_nanos >= cap_nanos:
            limit, text = "money", cap_text(cap, "money")
    if not limit:
        return None
    return Refusal(
        budget_id=cap.budget_id,
        scope=cap.scope,
        limit=limit,
        cap=text,
        set_by=setter_name(cap.set_by_id),  # read only for a refusal
        resets_on=end,
    )
