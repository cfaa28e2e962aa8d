"""The sums per (day, person) and per (day, chat), UsagePersonDay and UsageChatDay, are
exact: after recording, after a price change and after a rebuild they equal the daily sums
and the ledger grouped the same way. Every page and CSV shows the figures it showed when
it read UsageDay alone, for staff (who read these tables) and for a person (whose scope is
read in two disjoint parts)."""

import importlib
import threading
from datetime import date

import pytest
from django.db import close_old_connections, connection
from django.db.models import Sum
from django.test import Client

from chats.models import Chat, ChatMember
from tests.usage.helpers import price
from tests.usage.test_hub_days import WAIT, at, record_mix
from usage import selectors
from usage.models import Kind, UsageChatDay, UsageDay, UsagePersonDay, UsageRecord
from usage.selectors import (
    SUMMED,
    TABLE_ROWS,
    UsageFilter,
    usage_days,
    usage_models,
    usage_table,
    usage_total,
)
from usage.services import usage_prices_changed, usage_rebuild, usage_record

TABLES = {"person": (UsagePersonDay, "person_id"), "chat": (UsageChatDay, "chat_id")}
MARCH = ("2026-03-01", "2026-03-02")


def table_rows(by: str) -> dict:
    """One of the tables grouped by (day, owner id) → sums: a deleted person's or chat's
    rows keep their own key (slot) and join the day's rows of no one here, as pages see them."""
    table, field = TABLES[by]
    sums: dict = {}
    for row in table.objects.all():
        key = (row.day, getattr(row, field))
        old = sums.get(key, (0,) * len(SUMMED))
        sums[key] = tuple(a + getattr(row, n) for a, n in zip(old, SUMMED, strict=True))
    return sums


def grouped_days(by: str) -> dict:
    """UsageDay grouped by (day, person) or (day, chat)."""
    _, field = TABLES[by]
    sums = (
        UsageDay.objects.values("day", field)
        .order_by()
        .annotate(**{f"s_{n}": Sum(n) for n in SUMMED})
    )
    return {
        (row["day"], row[field]): tuple(int(row[f"s_{n}"] or 0) for n in SUMMED) for row in sums
    }


def ledger(by: str) -> dict:
    """The ledger grouped by (day, person) or (day, chat), computed here in Python."""
    _, field = TABLES[by]
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
        key = (r.day, getattr(r, field))
        old = sums.get(key, (0,) * len(row))
        sums[key] = tuple(a + b for a, b in zip(old, row, strict=True))
    return sums


def assert_exact() -> None:
    for by in TABLES:
        assert table_rows(by) == grouped_days(by) == ledger(by), by


@pytest.fixture
def hub(make_person):
    people = [make_person(name).pk for name in ("ada", "bob", "cy")]
    chats = [
        Chat.objects.create(chat_key=f"web:r{n}", channel="web", external_id=f"r{n}").pk
        for n in range(2)
    ]
    return people, chats


@pytest.mark.django_db
def test_after_recording_the_person_and_chat_sums_equal_the_daily_sums_and_the_ledger(hub):
    record_mix(*hub)
    assert UsagePersonDay.objects.count() < UsageDay.objects.count()  # coarser, by design
    assert UsagePersonDay.objects.filter(person__isnull=True).exists()  # the no-person row
    assert_exact()


@pytest.mark.storage
@pytest.mark.django_db(transaction=True)
def test_concurrent_records_of_one_person_and_chat_row_all_count(hub):
    people, chats = hub
    threads_n, each = 4, 5
    start = threading.Barrier(threads_n, timeout=WAIT)
    errors = []

    def work(model):
        try:
            start.wait()  # every thread's first record finds no row: they race to insert it
            for _ in range(each):
                usage_record(kind=Kind.TURN, chat_id=chats[0], person_id=people[0], model=model,
                             prompt_tokens=7, completion_tokens=3, at=at("2026-04-01"))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    # Different models: different UsageDay rows, one UsagePersonDay and one UsageChatDay row.
    threads = [threading.Thread(target=work, args=(f"m{n}",)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors
    for table in (UsagePersonDay, UsageChatDay):
        row = table.objects.get()
        assert (row.calls, row.prompt_tokens, row.completion_tokens) == (20, 140, 60)
    assert_exact()


@pytest.mark.django_db
def test_a_rebuild_recomputes_them_from_the_ledger(hub):
    record_mix(*hub)
    exact = {by: table_rows(by) for by in TABLES}
    UsagePersonDay.objects.update(calls=999, cost_nanos=1)  # drifted somehow
    UsageChatDay.objects.filter(day=date(2026, 3, 2)).delete()
    usage_rebuild()
    assert {by: table_rows(by) for by in TABLES} == exact
    assert_exact()


@pytest.mark.django_db
def test_a_rebuild_of_one_model_resums_the_days_it_was_used_on_and_only_those(hub):
    record_mix(*hub)
    usage_record(kind=Kind.TURN, chat_id=hub[1][0], person_id=hub[0][0], model="other",
                 prompt_tokens=5, at=at("2026-03-05"))  # fmt: skip
    UsagePersonDay.objects.update(calls=999)
    usage_rebuild(model="priced")  # used on March 1st and 2nd
    assert set(
        UsagePersonDay.objects.filter(day=date(2026, 3, 5)).values_list("calls", flat=True)
    ) == {999}
    march = UsagePersonDay.objects.filter(day__lte=date(2026, 3, 2))
    assert 999 not in march.values_list("calls", flat=True)
    assert {k: v for k, v in table_rows("person").items() if k[0] <= date(2026, 3, 2)} == {
        k: v for k, v in ledger("person").items() if k[0] <= date(2026, 3, 2)
    }
    assert table_rows("chat") == ledger("chat")


@pytest.mark.django_db
def test_a_price_change_reprices_them(hub):
    record_mix(*hub)
    before = table_rows("person")
    price("unpriced", 1, 1, valid_from=date(2026, 3, 2))
    usage_prices_changed(model="unpriced")
    assert table_rows("person") != before  # the second day's unpriced spend got a cost
    assert_exact()
    second = UsagePersonDay.objects.filter(day=date(2026, 3, 2)).aggregate(u=Sum("unpriced_tokens"))
    assert second["u"] == 0


@pytest.mark.django_db
def test_a_deleted_person_or_chat_keeps_the_sums_whole(hub, django_user_model):
    people, chats = hub
    record_mix(*hub)
    django_user_model.objects.filter(pk=people[1]).delete()  # no clash with the no-person row
    Chat.objects.filter(pk=chats[1]).delete()
    usage_record(kind=Kind.TURN, chat_id=None, person_id=None, model="priced",
                 prompt_tokens=3, at=at(MARCH[0]))  # fmt: skip
    assert_exact()
    usage_rebuild()
    assert_exact()


@pytest.mark.django_db
def test_the_migration_fills_them_from_the_daily_sums(hub):
    from django.apps import apps

    record_mix(*hub)
    exact = {by: table_rows(by) for by in TABLES}
    UsagePersonDay.objects.all().delete()
    UsageChatDay.objects.all().delete()
    migration = importlib.import_module("usage.migrations.0004_person_chat_days")
    migration.fill_from_day_sums(apps, None)
    assert {by: table_rows(by) for by in TABLES} == exact
    assert_exact()


def from_usage_days(viewer, where, by=None):
    """The pages' source before these tables: UsageDay in the viewer's scope, one read."""
    return [usage_days(viewer, where)]


def breakdown(viewer, where, by):
    rows, groups = usage_table(viewer, where, by)
    return [(row.key, row.label, row.spend) for row in rows], groups


@pytest.fixture
def people_and_rooms(hub, make_person):
    """ada owns the first room; staff stella; everyone spends in both rooms."""
    people, chats = hub
    from django.contrib.auth import get_user_model

    ada = get_user_model().objects.get(pk=people[0])
    ChatMember.objects.create(chat_id=chats[0], person=ada, role=ChatMember.Role.OWNER)
    record_mix(*hub)
    return {"staff": make_person("stella", is_staff=True), "ada": ada, "people": people,
            "chats": chats}  # fmt: skip


FILTERS = [
    {},
    {"kind": Kind.TURN},
    {"model": "priced"},
    {"person": "me"},
    {"person": 0},
    {"chat": 0},
    {"chat": 1},
    {"person": "me", "chat": 0},
]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "ada"])
@pytest.mark.parametrize("filters", FILTERS)
def test_every_breakdown_equals_the_one_read_from_the_daily_sums(
    people_and_rooms, monkeypatch, who, filters
):
    world = people_and_rooms
    viewer = world[who]
    person = filters.get("person")
    where = UsageFilter(
        start=date(2026, 3, 1),
        end=date(2026, 3, 2),
        person_id=world["ada"].pk if person == "me" else person,
        chat_id=world["chats"][filters["chat"]] if "chat" in filters else None,
        model=filters.get("model"),
        kind=filters.get("kind"),
    )
    now = {by: breakdown(viewer, where, by) for by in selectors.GROUPINGS}
    totals = (usage_total(viewer, where), usage_models(viewer, where))
    monkeypatch.setattr(selectors, "_sources", from_usage_days)
    before = {by: breakdown(viewer, where, by) for by in selectors.GROUPINGS}
    assert now == before
    assert totals == (usage_total(viewer, where), usage_models(viewer, where))
    assert any(rows for rows, _ in now.values()) or who == "ada"


@pytest.mark.django_db
def test_the_largest_rows_and_the_count_of_all_groups(hub, make_person, monkeypatch):
    people, _ = hub
    rooms = [
        Chat.objects.create(chat_key=f"web:x{n}", channel="web", external_id=f"x{n}").pk
        for n in range(TABLE_ROWS + 5)
    ]
    for n, room in enumerate(rooms):
        usage_record(kind=Kind.TURN, chat_id=room, person_id=people[n % 3], model="m",
                     prompt_tokens=10 + n, at=at(MARCH[n % 2]))  # fmt: skip
    staff = make_person("stella", is_staff=True)
    where = UsageFilter(start=date(2026, 3, 1), end=date(2026, 3, 2))
    rows, groups = breakdown(staff, where, "chat")
    assert groups == TABLE_ROWS + 5 and len(rows) == TABLE_ROWS
    assert rows[0][0] == str(rooms[-1])  # the largest first
    monkeypatch.setattr(selectors, "_sources", from_usage_days)
    assert breakdown(staff, where, "chat") == (rows, groups)


def usage_section(response) -> str:
    """The page's usage section (the rest holds a CSRF token, new at every request)."""
    page = response.content.decode()
    return page[page.index('<section class="card usage"') : page.index("</section>")]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["staff", "ada"])
@pytest.mark.parametrize("by", selectors.GROUPINGS)
def test_the_pages_and_csvs_show_what_they_showed_from_the_daily_sums(
    people_and_rooms, monkeypatch, who, by
):
    client = Client()
    client.force_login(people_and_rooms[who])
    query = {"start": MARCH[0], "end": MARCH[1], "by": by}
    pages = [client.get("/usage/", query), client.get("/usage/", {**query, "format": "csv"})]
    monkeypatch.setattr(selectors, "_sources", from_usage_days)
    again = [client.get("/usage/", query), client.get("/usage/", {**query, "format": "csv"})]
    assert [p.status_code for p in pages + again] == [200] * 4
    assert usage_section(pages[0]) == usage_section(again[0])  # totals, chart, table
    assert pages[1].content.decode() == again[1].content.decode()
    assert len(pages[1].content.decode().splitlines()) > 1  # a table, not only its header


@pytest.mark.django_db
def test_the_table_escapes_what_people_named(make_person):
    """The table's rows are built in Python, not by the template: names are still escaped."""
    room = Chat.objects.create(chat_key="web:x", channel="web", external_id="x",
                               title='<b>Room</b> & "friends"')  # fmt: skip
    usage_record(kind=Kind.TURN, chat_id=room.pk, person_id=None, model="m", prompt_tokens=5)
    client = Client()
    client.force_login(make_person("stella", is_staff=True))
    page = client.get("/usage/", {"by": "chat"}).content.decode()
    assert "&lt;b&gt;Room&lt;/b&gt; &amp; &quot;friends&quot;" in page
    assert "<b>Room</b>" not in page
