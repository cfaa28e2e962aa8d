"""Reads of the usage app. Everything reads the daily sums, never the ledger, except the
drill-down, which pages through the ledger's records. Staff pages read the smallest table
of sums that has the columns they need (`_sources`): the hub's per (day, model, kind)
without a person or chat; per (day, person) or per (day, chat) without a model or kind;
else UsageDay. `spend` of the hub reads the hub's; everything else reads UsageDay.

Who may read what: staff read everything; a person reads their own spend (wherever it was
made) and the whole spend of the chats they own; nobody else reads anything of theirs.
`usage_scope` is that rule as a filter; every selector a page uses applies it.

`spend` is the one read for budgets: the sums of a person, a chat or the hub between two
days, with no viewer (the caller decides who may see it)."""

from dataclasses import dataclass, replace
from datetime import date, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db.models import Count, Q, QuerySet, Sum, Window

from chats.models import Chat, ChatMember
from usage.models import (
    NANOS,
    Kind,
    UsageChatDay,
    UsageDay,
    UsageHubDay,
    UsagePersonDay,
    UsageRecord,
)

GROUPINGS = ("day", "person", "chat", "model", "kind")
TABLE_ROWS = 100  # the most rows one breakdown by person or chat (and its CSV) holds
SUMMED = ("calls", "prompt_tokens", "completion_tokens", "cost_nanos", "unpriced_tokens",
          "unpriced_calls", "duration_ms", "audio_ms")  # fmt: skip


@dataclass(frozen=True)
class Spend:
    """Sums of usage: tokens, calls, and the cost of the priced part (in billionths)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_nanos: int = 0
    unpriced_tokens: int = 0
    unpriced_calls: int = 0
    duration_ms: int = 0
    audio_ms: int = 0  # audio transcribed (a unit of its own)

    @property
    def audio_seconds(self) -> int:
        return (self.audio_ms + 500) // 1000

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def priced_cost(self) -> Decimal:
        """The cost of the priced calls alone (a lower bound when some are unpriced)."""
        return Decimal(self.cost_nanos) / NANOS

    @property
    def cost(self) -> Decimal | None:
        """The whole cost, or None when any model call in it had no price (unknown)."""
        if self.unpriced_calls or self.unpriced_tokens:
            return None
        return self.priced_cost

    @property
    def cost_known_in_part(self) -> bool:
        return self.cost is None and self.cost_nanos > 0

    @classmethod
    def of(cls, row: dict | None) -> "Spend":
        row = row or {}
        return cls(**{name: int(row.get(name) or 0) for name in SUMMED})


def _sums():
    return {name: Sum(name) for name in SUMMED}


def spend(
    *, start: date, end: date, person_id: int | None = None, chat_id: int | None = None
) -> Spend:
    """What a person (`person_id`), a chat (`chat_id`), both, or the whole hub (neither)
    spent from `start` to before `end` (UTC days): one indexed aggregate over the sums."""
    if person_id is None and chat_id is None:
        rows = UsageHubDay.objects.filter(day__gte=start, day__lt=end)
        return Spend.of(rows.aggregate(**_sums()))
    rows = UsageDay.objects.filter(day__gte=start, day__lt=end)
    if person_id is not None:
        rows = rows.filter(person_id=person_id)
    if chat_id is not None:
        rows = rows.filter(chat_id=chat_id)
    return Spend.of(rows.aggregate(**_sums()))


def usage_scope(viewer) -> Q:
    """The filter of the sums and records `viewer` may read (see the module docstring)."""
    if viewer.is_staff:
        return Q()
    owned = ChatMember.objects.filter(person=viewer, role=ChatMember.Role.OWNER).values("chat_id")
    return Q(person_id=viewer.pk) | Q(chat_id__in=owned)


def owned_chat_ids(viewer) -> set[int]:
    return set(
        ChatMember.objects.filter(person=viewer, role=ChatMember.Role.OWNER).values_list(
            "chat_id", flat=True
        )
    )


@dataclass(frozen=True)
class UsageFilter:
    """What one usage page shows: a range of UTC days (both ends included) and optional
    person, chat, model and kind."""

    start: date
    end: date
    person_id: int | None = None
    chat_id: int | None = None
    model: str | None = None
    kind: str | None = None

    def apply(self, rows: QuerySet) -> QuerySet:
        rows = rows.filter(day__gte=self.start, day__lte=self.end)
        if self.person_id == 0:  # the spend of no person (unlinked users)
            rows = rows.filter(person__isnull=True)
        elif self.person_id is not None:
            rows = rows.filter(person_id=self.person_id)
        if self.chat_id is not None:
            rows = rows.filter(chat_id=self.chat_id)
        if self.model is not None:
            rows = rows.filter(model=self.model)
        if self.kind is not None:
            rows = rows.filter(kind=self.kind)
        return rows


def usage_days(viewer, where: UsageFilter) -> QuerySet[UsageDay]:
    """The daily sums `viewer` may read that match `where`."""
    return where.apply(UsageDay.objects.filter(usage_scope(viewer)))


def _sources(viewer, where: UsageFilter, by: str | None = None) -> list[QuerySet]:
    """Where the sums of `where` for `viewer`, grouped `by` a column (or not at all), are
    read: one or two querysets of daily sums whose rows never overlap and together sum to
    exactly what `usage_days(viewer, where)` sums to.

    Staff read the smallest table that has the columns the page needs: the hub's sums per
    (day, model, kind) without a person or chat; per (day, person) or per (day, chat)
    without a model or kind (the table by person or chat, a page narrowed to one person or
    one chat); else UsageDay. Anyone else reads their scope, `person = me OR chat IN (my
    rooms)`, as two disjoint reads that each follow an index: their own rows
    (UsagePersonDay's where the page needs no chat, model or kind, else UsageDay's), and
    the rest of their rooms' rows in UsageDay. As one OR, PostgreSQL scanned a large part
    of the index over a long range."""
    whole = where.model is None and where.kind is None and by not in ("model", "kind")
    if viewer.is_staff:
        if where.person_id is None and where.chat_id is None and by != "person" and by != "chat":
            return [where.apply(UsageHubDay.objects.all())]
        if whole and where.chat_id is None and by != "chat":
            return [where.apply(UsagePersonDay.objects.all())]
        if whole and where.person_id is None and by != "person":
            return [where.apply(UsageChatDay.objects.all())]
        return [where.apply(UsageDay.objects.all())]
    own = UsageDay
    if whole and where.chat_id is None and by != "chat":
        own = UsagePersonDay  # their own rows need no chat, model or kind: a row a day
    mine = where.apply(own.objects.filter(person_id=viewer.pk))
    rooms = sorted(owned_chat_ids(viewer))
    if not rooms:
        return [mine]
    others = UsageDay.objects.filter(chat_id__in=rooms).exclude(person_id=viewer.pk)
    return [mine, where.apply(others)]


def usage_total(viewer, where: UsageFilter) -> Spend:
    return _merged([Spend.of(rows.aggregate(**_sums())) for rows in _sources(viewer, where)])


def _merged(spends: list[Spend]) -> Spend:
    if len(spends) == 1:
        return spends[0]
    return Spend(**{name: sum(getattr(s, name) for s in spends) for name in SUMMED})


@dataclass(frozen=True)
class UsageRow:
    key: str  # the group's value as a filter takes it ("" for none)
    label: str
    spend: Spend


_GROUP_FIELD = {"day": "day", "person": "person_id", "chat": "chat_id", "model": "model",
                "kind": "kind"}  # fmt: skip


def _largest_first(column: str) -> tuple:
    return ("-prompt_tokens", "-completion_tokens", "-calls", column)


def usage_table(viewer, where: UsageFilter, by: str) -> tuple[list[UsageRow], int]:
    """One breakdown of the page (by day, person, chat, model or kind), largest first (by
    day: newest first, every day), at most TABLE_ROWS rows; and how many groups in all."""
    column = _GROUP_FIELD[by]
    sources = _sources(viewer, where, by)
    if len(sources) == 1:
        groups, total = _grouped(sources[0], column, by)
    else:
        groups, total = _grouped_in_python(sources, column, by)
    labels = _labels(by, [group[column] for group in groups])
    rows = [
        UsageRow(
            key="" if group[column] is None else str(group[column]),
            label=labels.get(group[column], ""),
            spend=Spend.of(group),
        )
        for group in groups
    ]
    return rows, total


def _grouped(rows: QuerySet, column: str, by: str) -> tuple[list[dict], int]:
    """The groups of one source, in SQL: by day every day (the range bounds them,
    USAGE_MAX_RANGE_DAYS; the chart needs every one), else the TABLE_ROWS largest, with
    the number of groups counted over the same grouping (a window: one pass, not two)."""
    grouped = rows.values(column).order_by().annotate(**_sums())
    if by == "day":
        groups = list(grouped.order_by("-day"))
        return groups, len(groups)
    grouped = grouped.annotate(n_groups=Window(Count("*"))).order_by(*_largest_first(column))
    groups = list(grouped[:TABLE_ROWS])
    return groups, groups[0]["n_groups"] if groups else 0


def _grouped_in_python(sources: list[QuerySet], column: str, by: str) -> tuple[list[dict], int]:
    """The groups of disjoint sources (a person's scope: a few thousand rows at most),
    each grouped in SQL, added up here, ordered as `_grouped` orders them."""
    merged: dict = {}
    for rows in sources:
        for group in rows.values(column).order_by().annotate(**_sums()):
            old = merged.get(group[column])
            if old is not None:
                group = {**old, **{name: (old[name] or 0) + (group[name] or 0) for name in SUMMED}}
            merged[group[column]] = group
    groups = list(merged.values())
    if by == "day":
        groups.sort(key=lambda group: group["day"], reverse=True)
        return groups, len(groups)
    groups.sort(
        key=lambda g: (-(g["prompt_tokens"] or 0), -(g["completion_tokens"] or 0),
                       -(g["calls"] or 0), g[column] is None, g[column] or 0)
    )  # fmt: skip
    return groups[:TABLE_ROWS], len(groups)


def _labels(by: str, keys: list) -> dict:
    if by == "day":
        return {key: key.isoformat() for key in keys}
    if by == "kind":
        return {key: Kind(key).label if key in Kind.values else key for key in keys}
    if by == "model":
        return {key: key or "(none)" for key in keys}
    if by == "person":
        ids = [key for key in keys if key is not None]
        people = get_user_model().objects.filter(pk__in=ids)
        labels = {person.pk: person.get_username() for person in people}
        labels[None] = "(no person)"
        return labels
    ids = [key for key in keys if key is not None]
    labels = {chat.pk: chat_label(chat) for chat in Chat.objects.filter(pk__in=ids)}
    labels[None] = "(no chat)"
    return labels


def chat_label(chat: Chat) -> str:
    return chat.title or f"{chat.channel} {chat.external_id}"


def usage_series(
    viewer, where: UsageFilter, day_rows: list[UsageRow] | None = None
) -> list[UsageRow]:
    """One row per day of the range, oldest first, days without usage included (for the
    chart: its gaps are real). `day_rows`: the table by day, when already read."""
    if day_rows is None:
        day_rows, _ = usage_table(viewer, where, "day")
    by_day = {row.key: row for row in day_rows}
    days = []
    day = where.start
    while day <= where.end:
        key = day.isoformat()
        days.append(by_day.get(key) or UsageRow(key=key, label=key, spend=Spend()))
        day += timedelta(days=1)
    return days


def spend_sum(rows: list[UsageRow]) -> Spend:
    """The sum of some rows' spend (e.g. the days of a series: the range's total)."""
    return Spend(**{name: sum(getattr(row.spend, name) for row in rows) for name in SUMMED})


def usage_records(viewer, where: UsageFilter) -> QuerySet[UsageRecord]:
    """The ledger's records `viewer` may read that match `where`, newest first (the
    drill-down to the turns; the caller pages it)."""
    return (
        where.apply(UsageRecord.objects.filter(usage_scope(viewer)))
        .select_related("person", "chat")
        .order_by("-day", "-id")  # the (day, id) index: no sort of the ledger
    )


def usage_models(viewer, where: UsageFilter) -> list[str]:
    """The models in the sums `viewer` may read in the filter's range (its choices)."""
    found: set[str] = set()
    for rows in _sources(viewer, replace(where, model=None), "model"):
        found.update(rows.exclude(model="").values_list("model", flat=True).order_by().distinct())
    return sorted(found)


def usage_people(viewer) -> list:
    """The people a viewer may pick in the filter: staff, everyone; others only themselves
    (a chat owner sees the other people of their chats in the by-person table)."""
    people = get_user_model().objects.only("id", "username").order_by("username")
    return list(people if viewer.is_staff else people.filter(pk=viewer.pk))
