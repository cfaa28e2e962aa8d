"""The hub's sums per (day, model, kind), UsageHubDay, are exact: after recording they equal
the daily sums and the ledger grouped the same way; concurrent records of one row all
count; a rebuild and a price change recompute them; the staff pages that read them show
the figures the daily sums give, and nobody else reads them."""

import threading
from datetime import UTC, date, datetime

import pytest
from django.db import close_old_connections, connection
from django.db.models import Sum

from tests.usage.helpers import price
from usage.models import Kind, UsageDay, UsageHubDay, UsageRecord
from usage.selectors import (
    SUMMED,
    UsageFilter,
    spend,
    usage_days,
    usage_models,
    usage_table,
    usage_total,
)
from usage.services import usage_prices_changed, usage_rebuild, usage_record

WAIT = 60  # seconds a thread may wait before the test gives up (a hang, not a measurement)
KEY = ("day", "model", "kind")


def at(day: str, hour: int = 12) -> datetime:
    return datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC)


def grouped(rows) -> dict:
    """Sums of `rows` per (day, model, kind), zero groups left out."""
    sums = rows.values(*KEY).order_by().annotate(**{f"s_{n}": Sum(n) for n in SUMMED})
    return {
        tuple(row[k] for k in KEY): tuple(int(row[f"s_{n}"] or 0) for n in SUMMED) for row in sums
    }


def hub_rows() -> dict:
    return {
        tuple(getattr(row, k) for k in KEY): tuple(getattr(row, n) for n in SUMMED)
        for row in UsageHubDay.objects.all()
    }


def ledger_rows() -> dict:
    """The ledger grouped by (day, model, kind), computed here in Python, independently."""
    sums: dict = {}
    for r in UsageRecord.objects.all():
        priced = r.cost_nanos is not None
        row = (
            r.calls,
            r.prompt_tokens,
            r.completion_tokens,
            r.cost_nanos or 0,
            0 if priced else r.prompt_tokens + r.completion_tokens,
            0 if priced or r.kind == Kind.TOOL else r.calls,
            r.duration_ms or 0,
            r.audio_ms or 0,
        )
        key = (r.day, r.model, r.kind)
        old = sums.get(key, (0,) * len(row))
        sums[key] = tuple(a + b for a, b in zip(old, row, strict=True))
    return sums


def record_mix(people, chats) -> None:
    """Work of several people in several chats, priced and not, over two days, and tools."""
    price("priced", 2, 10)
    for n in range(24):  # each (day, model, kind) twice, by different people
        usage_record(
            kind=(Kind.TURN, Kind.SCHEDULED, Kind.REVIEW)[n % 3],
            chat_id=chats[n % len(chats)],
            person_id=people[(n + n // 12) % len(people)] if n % 4 else None,
            model=("priced", "unpriced")[n // 2 % 2],
            prompt_tokens=100 + n,
            completion_tokens=10 + n,
            at=at(("2026-03-01", "2026-03-02")[n % 2], hour=n),
        )
    usage_record(kind=Kind.TOOL, chat_id=chats[0], person_id=people[0], duration_ms=40,
                 detail="search", at=at("2026-03-01"))  # fmt: skip


@pytest.fixture
def hub(make_person):
    from chats.models import Chat

    people = [make_person(name).pk for name in ("ada", "bob", "cy")]
    chats = [
        Chat.objects.create(chat_key=f"web:r{n}", channel="web", external_id=f"r{n}").pk
        for n in range(2)
    ]
    return people, chats


@pytest.mark.django_db
def test_after_recording_the_hub_sums_equal_the_daily_sums_and_the_ledger(hub):
    record_mix(*hub)
    assert UsageHubDay.objects.count() < UsageDay.objects.count()  # coarser, by design
    assert hub_rows() == grouped(UsageDay.objects.all())
    assert hub_rows() == ledger_rows()
    priced = UsageHubDay.objects.get(day=date(2026, 3, 1), model="priced", kind=Kind.TURN)
    assert priced.cost_nanos > 0 and priced.unpriced_tokens == 0
    unpriced = UsageHubDay.objects.filter(model="unpriced").first()
    assert unpriced.cost_nanos == 0 and unpriced.unpriced_calls == unpriced.calls


@pytest.mark.storage
@pytest.mark.django_db(transaction=True)
def test_concurrent_records_of_one_hub_row_all_count(hub):
    people, chats = hub
    threads_n, each = 4, 5
    start = threading.Barrier(threads_n, timeout=WAIT)
    errors = []

    def work(person_id):
        try:
            start.wait()  # every thread's first record finds no row: they race to insert it
            for _ in range(each):
                usage_record(kind=Kind.TURN, chat_id=chats[0], person_id=person_id, model="m",
                             prompt_tokens=7, completion_tokens=3, at=at("2026-04-01"))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=work, args=(people[n % 3],)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors
    row = UsageHubDay.objects.get()
    assert (row.calls, row.prompt_tokens, row.completion_tokens) == (20, 140, 60)
    assert hub_rows() == grouped(UsageDay.objects.all()) == ledger_rows()


@pytest.mark.django_db
def test_rebuild_recomputes_the_hub_sums_from_the_ledger(hub):
    record_mix(*hub)
    exact = hub_rows()
    UsageHubDay.objects.update(calls=999, prompt_tokens=0, cost_nanos=1)  # drifted somehow
    UsageHubDay.objects.filter(day=date(2026, 3, 2)).delete()
    usage_rebuild()
    assert hub_rows() == exact == ledger_rows()


@pytest.mark.django_db
def test_a_rebuild_of_one_model_leaves_the_other_models_hub_rows_alone(hub):
    record_mix(*hub)
    UsageHubDay.objects.filter(model="unpriced").update(calls=999)
    UsageHubDay.objects.filter(model="priced").update(calls=999)
    usage_rebuild(model="priced")
    assert set(UsageHubDay.objects.filter(model="unpriced").values_list("calls", flat=True)) == {
        999
    }
    assert 999 not in UsageHubDay.objects.filter(model="priced").values_list("calls", flat=True)


@pytest.mark.django_db
def test_a_new_price_reprices_the_hub_sums(hub):
    record_mix(*hub)
    assert spend(start=date(2026, 3, 1), end=date(2026, 3, 3)).cost is None  # unpriced part
    price("unpriced", 1, 1, valid_from=date(2026, 3, 2))
    usage_prices_changed(model="unpriced")
    assert hub_rows() == ledger_rows() == grouped(UsageDay.objects.all())
    second = spend(start=date(2026, 3, 2), end=date(2026, 3, 3))
    assert second.cost is not None  # priced from its day on
    assert spend(start=date(2026, 3, 1), end=date(2026, 3, 2)).cost is None  # not before


@pytest.mark.django_db
def test_the_hub_spend_equals_the_sum_of_everyones(hub):
    record_mix(*hub)
    whole = spend(start=date(2026, 3, 1), end=date(2026, 3, 3))
    rows = UsageDay.objects.aggregate(**{n: Sum(n) for n in SUMMED})
    assert [getattr(whole, n) for n in SUMMED] == [rows[n] for n in SUMMED]


@pytest.mark.django_db
@pytest.mark.parametrize("by", ["day", "model", "kind"])
def test_staff_breakdowns_from_the_hub_sums_equal_those_of_the_daily_sums(hub, make_person, by):
    record_mix(*hub)
    staff = make_person("boss", is_staff=True)
    where = UsageFilter(start=date(2026, 3, 1), end=date(2026, 3, 2))
    rows, groups = usage_table(staff, where, by)
    column = {"day": "day", "model": "model", "kind": "kind"}[by]
    expected = {
        str(row[column]): tuple(int(row[n]) for n in SUMMED)
        for row in usage_days(staff, where)
        .values(column)
        .order_by()
        .annotate(**{n: Sum(n) for n in SUMMED})
    }
    assert {row.key: tuple(getattr(row.spend, n) for n in SUMMED) for row in rows} == expected
    assert groups == len(expected)
    assert usage_models(staff, where) == ["priced", "unpriced"]
    total = usage_total(staff, where)
    assert total.calls == UsageRecord.objects.aggregate(n=Sum("calls"))["n"]


@pytest.mark.django_db
def test_a_person_never_reads_the_hubs_sums(hub):
    """Without a person or chat in the filter a person still sees only their scope, not
    the hub's rows (which hold everyone's spend)."""
    from django.contrib.auth import get_user_model

    people, _ = hub
    record_mix(*hub)
    ada = get_user_model().objects.get(pk=people[0])  # owns no chat
    where = UsageFilter(start=date(2026, 3, 1), end=date(2026, 3, 2))
    mine = UsageRecord.objects.filter(person_id=ada.pk).aggregate(n=Sum("calls"))["n"]
    assert (
        usage_total(ada, where).calls == mine < UsageRecord.objects.aggregate(n=Sum("calls"))["n"]
    )
    rows, _ = usage_table(ada, where, "model")
    assert sum(row.spend.calls for row in rows) == mine


@pytest.mark.django_db
def test_staff_narrowed_to_a_person_or_chat_read_the_daily_sums(hub, make_person):
    people, chats = hub
    record_mix(*hub)
    staff = make_person("boss", is_staff=True)
    days = (date(2026, 3, 1), date(2026, 3, 2))
    by_person = usage_total(staff, UsageFilter(*days, person_id=people[1]))
    assert by_person.calls == UsageRecord.objects.filter(person_id=people[1]).count()
    by_chat = usage_total(staff, UsageFilter(*days, chat_id=chats[1]))
    assert by_chat.calls == UsageRecord.objects.filter(chat_id=chats[1]).count()
    nobody = usage_total(staff, UsageFilter(*days, person_id=0))
    assert nobody.calls == UsageRecord.objects.filter(person__isnull=True).count()


@pytest.mark.django_db
def test_the_migration_fills_the_hub_sums_from_the_daily_sums(hub):
    """A hub that recorded usage before the table existed gets its sums at the migration."""
    import importlib

    from django.apps import apps

    record_mix(*hub)
    exact = hub_rows()
    UsageHubDay.objects.all().delete()
    migration = importlib.import_module("usage.migrations.0003_hub_day")
    migration.fill_from_day_sums(apps, None)
    assert hub_rows() == exact == ledger_rows()
