"""Writes of the usage app: record a piece of work in the ledger and its day's sums in one
transaction, reprice after a price change, rebuild the sums from the ledger.

Attribution happens once, when a record is written: the person who authored the turn's
trigger; for a scheduled run, its payer (the schedule's owner when the run started, stored
with the run's prompt, so it holds after the schedule is deleted); for an integration user without a
person (API v1), the token's owner; nobody for an unlinked Telegram user (their spend
counts only against the chat and the hub)."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField, CharField, F, Q, Sum, Value
from django.db.models.functions import Cast, Coalesce, Concat
from django.utils import timezone

from chats.models import Message, Turn
from usage.models import (
    NOT_PRICED,
    SUM_COLUMNS,
    Kind,
    ModelPrice,
    UsageChatDay,
    UsageDay,
    UsageHubDay,
    UsagePersonDay,
    UsageRecord,
    day_slot,
    owner_slot,
)
from usage.prices import cost_nanos

OWNER_NAMESPACE = "owner:"  # chats.api.services.api_actor_namespace
SCHEDULE_NAMESPACE = "schedule"  # schedules.services.ACTOR_NAMESPACE
SCHEDULE_PAYER = "payer"  # schedules.services.PAYER_KEY: the key of the trigger's metadata


@dataclass(frozen=True)
class Attribution:
    person_id: int | None
    kind: str  # Kind.TURN or Kind.SCHEDULED


def attribution_of_trigger(trigger_id: int | None) -> Attribution:
    """Who spends for the work a trigger message started, and whether a schedule started it."""
    if trigger_id is None:
        return Attribution(None, Kind.TURN)
    row = (
        Message.objects.filter(pk=trigger_id)
        .values("metadata", "actor__person_id", "actor__namespace")
        .first()
    )
    if row is None:
        return Attribution(None, Kind.TURN)
    metadata = row["metadata"] if isinstance(row["metadata"], dict) else {}
    if row["actor__namespace"] == SCHEDULE_NAMESPACE and metadata.get("schedule"):
        payer = stored_payer(metadata)
        if payer is not None:  # a person, or no person any more (their account was deleted)
            users = get_user_model()._default_manager
            payer = users.filter(pk=payer).values_list("pk", flat=True).first()
        else:
            payer = schedule_owner(metadata["schedule"])
        return Attribution(payer, Kind.SCHEDULED)
    return Attribution(actor_spender(row["actor__person_id"], row["actor__namespace"]), Kind.TURN)


# Who owns a schedule, installed by the schedules app (`schedule_owner_lookup_install` in its
# ready()): usage never imports schedules, which records its own runs' usage through here.
_schedule_owner_lookup: Callable[[object], int | None] | None = None


def stored_payer(metadata: dict) -> int | None:
    """Who pays for a scheduled run, as its trigger's metadata says: the schedule's owner
    when the run started (`schedules.services` stores it with the prompt, so neither
    deleting the schedule nor anything done to it later changes it); None for a trigger
    stored before payers were (`schedule_owner` answers for those)."""
    payer = metadata.get(SCHEDULE_PAYER)
    if isinstance(payer, int) and not isinstance(payer, bool):
        return payer
    return None


def schedule_owner_lookup_install(lookup: Callable[[object], int | None]) -> None:
    """How `schedule_owner` finds a schedule's owner (the schedules app installs it)."""
    global _schedule_owner_lookup
    _schedule_owner_lookup = lookup


def schedule_owner(schedule_id) -> int | None:
    """Who spends for a run whose trigger names no payer (stored before payers were): its
    schedule's owner now (None when the schedule is gone, or no schedules app is
    installed)."""
    if _schedule_owner_lookup is None:
        return None
    return _schedule_owner_lookup(schedule_id)


def actor_spender(person_id: int | None, namespace: str | None) -> int | None:
    """Who spends for an actor other than a schedule's: its linked person, else the owner of
    the integration token it speaks through (`owner:<id>`), else nobody."""
    if person_id is not None:
        return person_id
    namespace = namespace or ""
    if namespace.startswith(OWNER_NAMESPACE) and namespace[len(OWNER_NAMESPACE) :].isdigit():
        return int(namespace[len(OWNER_NAMESPACE) :])
    return None


def _day_of(at: datetime) -> date:
    return at.astimezone(UTC).date()


def _add_to_day(record: UsageRecord) -> None:
    """Add one record to its day's sums: per (person, chat, model, kind), for the whole hub
    per (model, kind), per person and per chat."""
    priced = record.cost_nanos is not None
    tokens = record.prompt_tokens + record.completion_tokens
    values = {
        "calls": record.calls,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "cost_nanos": record.cost_nanos or 0,
        "unpriced_calls": 0 if priced or record.kind in NOT_PRICED else record.calls,
        "unpriced_tokens": 0 if priced else tokens,
        "duration_ms": record.duration_ms or 0,
        "audio_ms": record.audio_ms or 0,
    }
    slot = day_slot(record.day, record.person_id, record.chat_id, record.model, record.kind)
    _add(
        UsageDay,
        {"slot": slot},
        {"day": record.day, "person_id": record.person_id, "chat_id": record.chat_id,
         "model": record.model, "kind": record.kind},
        values,
    )  # fmt: skip
    _add(
        UsageHubDay,
        {"day": record.day, "model": record.model, "kind": record.kind},
        {},
        values,
    )
    _add(
        UsagePersonDay,
        {"slot": owner_slot(record.day, record.person_id)},
        {"day": record.day, "person_id": record.person_id},
        values,
    )
    _add(
        UsageChatDay,
        {"slot": owner_slot(record.day, record.chat_id)},
        {"day": record.day, "chat_id": record.chat_id},
        values,
    )


def _add(table, key: dict, fields: dict, values: dict) -> None:
    """Add `values` to the row of `key`: an increment in SQL (F()), or the row's insert;
    a concurrent insert of the same row is caught and becomes an increment."""
    increments = {name: F(name) + value for name, value in values.items() if value}
    if not increments:
        increments = {"calls": F("calls")}  # nothing to add; touch nothing else
    if table.objects.filter(**key).update(**increments):
        return
    try:
        with transaction.atomic():
            table.objects.create(**key, **fields, **values)
    except IntegrityError:  # another transaction inserted it first: add to theirs
        table.objects.filter(**key).update(**increments)


def usage_record(
    *,
    kind: str,
    chat_id: int | None,
    person_id: int | None,
    model: str = "",
    calls: int = 1,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    turn_id: int | None = None,
    review_id: int | None = None,
    duration_ms: int | None = None,
    detail: str = "",
    at: datetime | None = None,
    audio_ms: int | None = None,
    audio_cost_nanos: int | None = None,
) -> UsageRecord:
    """Write one ledger record, priced at the price of its day (None when unpriced; tool
    calls are never priced; a transcription is priced by its engine: `audio_cost_nanos`),
    and add it to its day's sums in the same transaction."""
    at = at or timezone.now()
    day = _day_of(at)
    cost = None
    if kind == Kind.TRANSCRIPTION:
        cost = audio_cost_nanos
    elif kind not in NOT_PRICED:
        cost = cost_nanos(model, day, prompt_tokens, completion_tokens)
    record = UsageRecord(
        at=at,
        day=day,
        kind=kind,
        model=model[:255],
        person_id=person_id,
        chat_id=chat_id,
        turn_id=turn_id,
        review_id=review_id,
        calls=calls,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_nanos=cost,
        duration_ms=duration_ms,
        audio_ms=audio_ms,
        detail=detail[:255],
    )
    with transaction.atomic():
        record.save(force_insert=True)
        _add_to_day(record)
    return record


def usage_record_model_work(
    *,
    kind: str,
    chat_id: int | None,
    turn: Turn | None,
    model: str,
    calls: int,
    prompt_tokens: int,
    completion_tokens: int,
    message_id: int | None = None,
    duration_ms: int | None = None,
) -> UsageRecord:
    """Record a turn's model calls (kind "turn"; "scheduled" when a schedule started it), a
    compression summary made for a turn, attributed through the turn's trigger, or work done
    for one message outside a turn (kind "vision": an image described; "extraction": a
    document's pages read, `calls` being the pages), attributed through that message
    (`message_id`)."""
    trigger_id = turn.trigger_id if turn is not None else message_id
    who = attribution_of_trigger(trigger_id)
    if kind == Kind.TURN:
        kind = who.kind
    return usage_record(
        kind=kind,
        chat_id=chat_id,
        person_id=who.person_id,
        model=model,
        calls=calls,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        turn_id=turn.pk if turn is not None else None,
        duration_ms=duration_ms,
    )


def usage_record_transcription(
    *, message_id: int, chat_id: int, engine: str, audio_ms: int, cost_nanos: int | None
) -> UsageRecord:
    """Record the transcription of one recording of a message (kind "transcription"):
    `audio_ms` of audio, attributed through that message (its author, usage's rule), priced
    by the engine (`cost_nanos`: 0 for the local engine, None when a paid one has no price)."""
    who = attribution_of_trigger(message_id)
    return usage_record(
        kind=Kind.TRANSCRIPTION,
        chat_id=chat_id,
        person_id=who.person_id,
        model=engine,
        audio_ms=audio_ms,
        audio_cost_nanos=cost_nanos,
        detail=f"message {message_id}",
    )


def usage_record_tool_call(*, turn: Turn, name: str, duration_ms: int | None) -> UsageRecord:
    """Count and time one tool call of a turn (never priced)."""
    who = attribution_of_trigger(turn.trigger_id)
    return usage_record(
        kind=Kind.TOOL,
        chat_id=turn.chat_id,
        person_id=who.person_id,
        turn_id=turn.pk,
        duration_ms=duration_ms,
        detail=name,
    )


def usage_record_review(*, review) -> UsageRecord:
    """Record a finished review's model calls, attributed like the turn it follows."""
    trigger_id = None
    if review.turn_id is not None:
        trigger_id = Turn.objects.filter(pk=review.turn_id).values_list("trigger_id", flat=True)
        trigger_id = trigger_id.first()
    who = attribution_of_trigger(trigger_id)
    return usage_record(
        kind=Kind.REVIEW,
        chat_id=review.chat_id,
        person_id=who.person_id,
        model=review.model,
        calls=review.iterations,
        prompt_tokens=review.prompt_tokens,
        completion_tokens=review.completion_tokens,
        review_id=review.pk,
        turn_id=review.turn_id,
        duration_ms=review.duration_ms,
    )


SUM_TABLES = (UsageDay, UsageHubDay, UsagePersonDay, UsageChatDay)


def _lock_for_rebuild() -> None:
    """Keep new records out while sums are recomputed: PostgreSQL takes table locks (the
    recorders wait, then add to the rebuilt rows); SQLite writers are serialised anyway."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "LOCK TABLE "
                + ", ".join(t._meta.db_table for t in (UsageRecord, *SUM_TABLES))
                + " IN SHARE ROW EXCLUSIVE MODE"
            )


def _reprice(records, model: str) -> None:
    """Set the cost of `model`'s records from its prices, interval by interval, in SQL
    (the same integer arithmetic as ModelPrice.cost_nanos)."""
    prices = list(ModelPrice.objects.filter(model=model).order_by("valid_from"))
    mine = records.filter(model=model).exclude(kind__in=(*NOT_PRICED, Kind.TRANSCRIPTION))
    if not prices:
        mine.update(cost_nanos=None)
        return
    mine.filter(day__lt=prices[0].valid_from).update(cost_nanos=None)
    big = BigIntegerField()  # PostgreSQL's integer × a price in millionths overflows int4
    for index, price in enumerate(prices):
        span = mine.filter(day__gte=price.valid_from)
        if index + 1 < len(prices):
            span = span.filter(day__lt=prices[index + 1].valid_from)
        span.update(
            cost_nanos=(
                Cast("prompt_tokens", big) * price.input_micros
                + Cast("completion_tokens", big) * price.output_micros
                + 500
            )
            / 1000
        )


def _sum_into_days(records) -> int:
    """Insert the day rows of these records' sums, in the database (INSERT … SELECT: no
    row travels through Python, which matters at millions); how many rows."""
    text = CharField()
    slot = Concat(
        Cast("day", text), Value("|"),
        Coalesce(Cast("person_id", text), Value("")), Value("|"),
        Coalesce(Cast("chat_id", text), Value("")), Value("|"),
        "kind", Value("|"), "model",
        output_field=text,
    )  # fmt: skip
    return _insert_sums(
        UsageDay, records, ("day", "person_id", "chat_id", "model", "kind"), {"slot": slot}
    )


def _sum_into_hub_days(records) -> int:
    """The same for the hub's sums per (day, model, kind)."""
    return _insert_sums(UsageHubDay, records, ("day", "model", "kind"), {})


def _owner_slot(field: str):
    """owner_slot() in SQL: "<day>|<id or ''>"."""
    text = CharField()
    return Concat(
        Cast("day", text), Value("|"), Coalesce(Cast(field, text), Value("")), output_field=text
    )


def _resum_owner_days(days: list[date] | None) -> None:
    """Recompute the sums per person and per chat of these days (None: every day) from
    UsageDay, which is exact: one INSERT … SELECT each."""
    source = UsageDay.objects.all() if days is None else UsageDay.objects.filter(day__in=days)
    for table, field in ((UsagePersonDay, "person_id"), (UsageChatDay, "chat_id")):
        stale = table.objects.all() if days is None else table.objects.filter(day__in=days)
        stale.delete()
        sums = {name: Sum(name) for name in SUM_COLUMNS}
        _insert_grouped(table, source, ("day", field), {"slot": _owner_slot(field), **sums})


def _insert_sums(table, records, keys: tuple, extra: dict) -> int:
    """INSERT INTO `table` the sums of `records` grouped by `keys` (record field names,
    which are the table's too), with `extra` columns computed per group."""
    unpriced = Q(cost_nanos__isnull=True)
    sums = {
        "calls": Sum("calls"),
        "prompt_tokens": Sum("prompt_tokens"),
        "completion_tokens": Sum("completion_tokens"),
        "cost_nanos": Sum("cost_nanos", default=0),
        "unpriced_calls": Sum("calls", filter=unpriced & ~Q(kind__in=NOT_PRICED), default=0),
        "unpriced_tokens": Coalesce(
            Sum(
                Cast("prompt_tokens", BigIntegerField()) + F("completion_tokens"),
                filter=unpriced,
            ),
            0,
        ),
        "duration_ms": Sum("duration_ms", default=0),
        "audio_ms": Sum("audio_ms", default=0),
    }
    return _insert_grouped(table, records, keys, {**extra, **sums})


def _insert_grouped(table, rows, keys: tuple, columns: dict) -> int:
    """INSERT INTO `table` one row per group of `rows` by `keys` (fields of both), its
    other `columns` computed per group (by name: an expression)."""
    # Aliases must not clash with the rows' own fields: n_<name>.
    annotations = {f"n_{name}": value for name, value in columns.items()}
    groups = rows.values(*keys).order_by().annotate(**annotations).values_list(*keys, *annotations)
    select, params = groups.query.sql_with_params()
    meta = table._meta
    names = [key.removesuffix("_id") for key in keys] + list(columns)
    columns = ", ".join(connection.ops.quote_name(meta.get_field(n).column) for n in names)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({columns}) {select}", params
        )
        return cursor.rowcount


@transaction.atomic
def usage_rebuild(*, model: str | None = None, reprice: bool = True) -> int:
    """Recompute the daily sums (UsageDay and UsageHubDay) from the ledger (all of them, or
    one model's), repricing the records at the current prices first, and the sums per
    person and per chat of the days that model's records fall on; how many UsageDay rows
    now hold them."""
    _lock_for_rebuild()
    records = UsageRecord.objects.all()
    days, hub_days = UsageDay.objects.all(), UsageHubDay.objects.all()
    if model is not None:
        records = records.filter(model=model)
        days, hub_days = days.filter(model=model), hub_days.filter(model=model)
    if reprice:
        models = [model] if model is not None else _priced_or_recorded_models()
        for name in models:
            _reprice(UsageRecord.objects.all(), name)
    # The sums per person and per chat mix every model: the days the model's sums or
    # records fall on are summed again, whole (None: every day).
    touched = None
    if model is not None:
        touched = set(days.order_by().values_list("day", flat=True).distinct())
        touched |= set(records.order_by().values_list("day", flat=True).distinct())
        touched = sorted(touched)
    days.delete()
    hub_days.delete()
    rows = _sum_into_days(records)
    _sum_into_hub_days(records)
    _resum_owner_days(touched)
    return rows


def _priced_or_recorded_models() -> list[str]:
    recorded = set(
        UsageRecord.objects.exclude(kind__in=(*NOT_PRICED, Kind.TRANSCRIPTION))
        .exclude(model="")
        .values_list("model", flat=True)
        .distinct()
    )
    return sorted(recorded | set(ModelPrice.objects.values_list("model", flat=True)))


def usage_prices_changed(*, model: str) -> int:
    """A price of `model` was added, changed or removed: reprice its records and rebuild its
    sums, so each price applies from its day on and only then."""
    return usage_rebuild(model=model)
