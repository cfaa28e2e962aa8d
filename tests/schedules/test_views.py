"""The web surfaces of schedules: who sees a chat's schedules (members, staff; outsiders get
the 404 of a missing chat), who changes them (the owner, the chat's owners and admins,
staff; another member gets 403), the create and edit forms with the services' messages,
the live preview in the schedule's zone and the viewer's, run receipts, the scheduler
banner, "My schedules" and the time-zone preference."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from freezegun import freeze_time

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure, chat_member_remove
from operations.services import heartbeat_beat
from schedules.models import PersonPreference, Schedule, ScheduleRun
from schedules.selectors import DISPATCHER_HEARTBEAT
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db

CRON = {
    "prompt": "Post the open incidents",
    "kind": "cron",
    "cron": "0 9 * * 1-5",
    "timezone": "Europe/Berlin",
    "catch_up": "skip",
    "mode": "chat",
}


def client_for(person) -> Client:
    client = Client()
    client.force_login(person)
    return client


def panel_url(chat) -> str:
    return f"/chats/{chat.chat_key}/schedules"


@pytest.fixture
def colleague(make_person, team_chat):
    """Another plain member of the team room."""
    person = make_person("carla")
    chat_member_ensure(chat=team_chat, person=person)
    return person


@pytest.fixture
def staff(make_person):
    """Staff, not a member of the team room."""
    return make_person("sam", is_staff=True)


@pytest.fixture
def theirs(make_schedule, member):
    """A schedule of the plain member `member` in the team room (owned by `owner`)."""
    return make_schedule(person=member, cron="0 9 * * 1-5", tz="Europe/Berlin")


def action(client, schedule, name):
    return client.post(f"/schedules/{schedule.pk}/{name}", {"back": "chat"})


# --- who sees ------------------------------------------------------------------------------


def test_members_see_the_panel_and_outsiders_get_the_404_of_a_missing_chat(
    team_chat, theirs, colleague, outsider
):
    with freeze_time(T0):
        page = client_for(colleague).get(panel_url(team_chat))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Post the open incidents" in html
    assert "At 09:00, Monday through Friday (Europe/Berlin)" in html
    # The next five slots, in the schedule's zone and in the viewer's (UTC by default).
    assert "Tue 2026-07-07 09:00 CEST" in html and "Tue 2026-07-07 07:00 UTC" in html
    assert "Mon 2026-07-13 09:00 CEST" in html
    # A plain member who does not own it sees no buttons that change it.
    assert "data-pause" not in html and "data-edit" not in html and "data-run-now" not in html

    stranger = client_for(outsider)
    missing = stranger.get("/chats/web:nope/schedules")
    assert missing.status_code == 404
    assert stranger.get(panel_url(team_chat)).status_code == 404
    assert stranger.get(f"/schedules/{theirs.pk}/edit").status_code == 404
    for name in ("pause", "resume", "run", "delete"):
        assert action(stranger, theirs, name).status_code == 404
    assert Schedule.objects.get(pk=theirs.pk).enabled
    assert not ScheduleRun.objects.exists()


def test_another_member_may_see_but_not_change(theirs, colleague):
    client = client_for(colleague)
    assert client.get(f"/schedules/{theirs.pk}/edit").status_code == 403
    edited = client.post(f"/schedules/{theirs.pk}/edit", CRON | {"cron": "0 10 * * *"})
    assert edited.status_code == 403
    for name in ("pause", "run", "delete"):
        assert action(client, theirs, name).status_code == 403
    schedule = Schedule.objects.get(pk=theirs.pk)
    assert schedule.enabled and schedule.cron == "0 9 * * 1-5"
    assert not ScheduleRun.objects.exists()


def test_the_owner_and_the_chat_admin_change_it_but_only_the_owner_its_words(
    team_chat, theirs, member, owner, colleague
):
    with freeze_time(T0):
        page = client_for(owner).get(panel_url(team_chat)).content.decode()
    assert "data-pause" in page and "data-edit" in page  # the chat's owner manages it
    # The schedule's owner changes the words and the time.
    mine = client_for(member)
    with freeze_time(T0):
        saved = mine.post(
            f"/schedules/{theirs.pk}/edit", CRON | {"prompt": "New words", "cron": "0 10 * * *"}
        )
    assert saved.status_code == 302 and saved["Location"].endswith(f"#schedule-{theirs.pk}")
    theirs.refresh_from_db()
    assert (theirs.prompt, theirs.cron) == ("New words", "0 10 * * *")
    # A chat admin changes the time; the prompt field is not theirs to change (disabled,
    # and whatever is posted for it is ignored: a run posts it in the owner's name).
    ChatMember.objects.filter(chat=team_chat, person=colleague).update(role="admin")
    admin = client_for(colleague)
    form = admin.get(f"/schedules/{theirs.pk}/edit").content.decode()
    assert re.search(r"<textarea[^>]*name=\"prompt\"[^>]*disabled", form)
    with freeze_time(T0):
        saved = admin.post(
            f"/schedules/{theirs.pk}/edit", CRON | {"prompt": "Admin words", "cron": "0 11 * * *"}
        )
    assert saved.status_code == 302
    theirs.refresh_from_db()
    assert (theirs.prompt, theirs.cron) == ("New words", "0 11 * * *")
    assert action(admin, theirs, "pause").status_code == 302
    theirs.refresh_from_db()
    assert not theirs.enabled and theirs.paused_reason == "paused by carla"
    assert action(mine, theirs, "resume").status_code == 302
    assert Schedule.objects.get(pk=theirs.pk).enabled
    assert action(admin, theirs, "delete").status_code == 302
    assert not Schedule.objects.filter(pk=theirs.pk).exists()


def test_staff_see_and_manage_any_chats_schedules_but_create_only_where_they_are_members(
    team_chat, theirs, staff
):
    client = client_for(staff)
    with freeze_time(T0):
        page = client.get(panel_url(team_chat))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Post the open incidents" in html and 'id="no-create"' in html
    assert "schedule-create" not in html
    with freeze_time(T0):
        refused = client.post(panel_url(team_chat), CRON)
    assert refused.status_code == 403 and Schedule.objects.count() == 1
    assert action(client, theirs, "pause").status_code == 302
    assert not Schedule.objects.get(pk=theirs.pk).enabled


# --- create, run now, receipts -------------------------------------------------------------


def test_a_member_creates_a_schedule_on_the_panel(team_chat, colleague):
    with freeze_time(T0):
        created = client_for(colleague).post(panel_url(team_chat), CRON, follow=True)
    assert created.status_code == 200
    schedule = Schedule.objects.get()
    assert (schedule.owner, schedule.chat, schedule.timezone) == (
        colleague,
        team_chat,
        "Europe/Berlin",
    )
    assert schedule.next_fire_at == T0 + timedelta(hours=1)  # 09:00 Berlin
    assert f"Schedule #{schedule.pk} created" in created.content.decode()


def test_a_one_off_time_is_a_wall_time_in_the_schedules_zone(team_chat, member):
    fields = CRON | {"kind": "once", "cron": "", "at": "2026-07-08T09:30"}
    with freeze_time(T0):
        assert client_for(member).post(panel_url(team_chat), fields).status_code == 302
    schedule = Schedule.objects.get()
    assert schedule.run_at == T0 + timedelta(days=1, hours=1, minutes=30)  # 07:30 UTC


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"cron": "0 25 * * *"}, "cron", "the hour field &#x27;25&#x27; is not valid"),
        ({"cron": "0 9 * *"}, "cron", "has 4 field(s); it needs 5"),
        ({"timezone": "Europe/Berlinn"}, "timezone", "did you mean Europe/Berlin"),
        ({"kind": "interval", "every": "2"}, "every", "the minimum interval is 5"),
        ({"kind": "once", "at": "2026-07-06T09:00"}, "at", "is in the past"),
        ({"kind": "once", "at": "tomorrow"}, "at", "is not a date and time"),
        ({"prompt": " "}, "prompt", "the prompt is empty"),
    ],
)
def test_invalid_input_is_shown_next_to_the_field_it_names(team_chat, member, fields, field, says):
    with freeze_time(T0):
        refused = client_for(member).post(panel_url(team_chat), CRON | fields)
    assert refused.status_code == 400
    html = refused.content.decode()
    error = re.search(rf'id="error-{field}">([^<]*)<', html)
    assert error and says in error.group(1), html
    assert not Schedule.objects.exists()


def test_run_now_records_a_run_and_starts_its_turn(team_chat, theirs, member):
    response = action(client_for(member), theirs, "run")
    assert response.status_code == 302
    run = ScheduleRun.objects.get(schedule=theirs)
    assert run.status == ScheduleRun.Status.RUNNING and run.turn is not None
    assert run.trigger.text == "Post the open incidents"


def test_run_now_again_while_the_first_is_open_is_refused_saying_why(team_chat, theirs, member):
    client = client_for(member)
    action(client, theirs, "run")
    again = client.post(f"/schedules/{theirs.pk}/run", {"back": "chat"}, follow=True)
    assert again.status_code == 200
    assert "asked for now, is still waiting or under way" in again.content.decode()
    assert ScheduleRun.objects.filter(schedule=theirs).count() == 1


def test_resuming_a_schedule_whose_owner_left_says_why(team_chat, theirs, member, owner):
    chat_member_remove(chat=team_chat, person_id=member.pk, by_role="owner")
    Schedule.objects.filter(pk=theirs.pk).update(enabled=False, paused_reason="gone")
    resumed = client_for(owner).post(f"/schedules/{theirs.pk}/resume", follow=True)
    assert "stays paused: The schedule&#x27;s owner can no longer read its chat." in (
        resumed.content.decode()
    )
    assert not Schedule.objects.get(pk=theirs.pk).enabled


def test_the_run_history_shows_each_runs_receipt(team_chat, theirs, colleague):
    ScheduleRun.objects.create(
        schedule=theirs,
        slot_at=T0,
        status=ScheduleRun.Status.DELIVERED,
        lateness_seconds=12.4,
        delivered_to=[
            {
                "channel": "web",
                "chat": team_chat.chat_key,
                "message": 77,
                "stored": True,
                "delivered": True,
            }
        ],
    )
    ScheduleRun.objects.create(
        schedule=theirs,
        slot_at=T0 + timedelta(days=1),
        status=ScheduleRun.Status.FAILED,
        error="the model is down",
    )
    html = client_for(colleague).get(panel_url(team_chat)).content.decode()
    delivered = html[html.index("run-delivered") :]
    assert "Delivered" in delivered and "12 s" in delivered
    assert f"/chats/{team_chat.chat_key}/?at=77#message-77" in delivered
    assert "in web: delivered" in delivered
    assert "the model is down" in html


# --- preview ------------------------------------------------------------------------------


def test_the_preview_shows_five_fire_times_in_both_zones_and_the_description(member):
    PersonPreference.objects.create(person=member, timezone="America/New_York")
    with freeze_time(T0):
        html = client_for(member).get("/schedules/preview", CRON).content.decode()
    assert "At 09:00, Monday through Friday (Europe/Berlin)" in html
    rows = re.findall(r"<tr><td>.*?</tr>", html)
    assert len(rows) == 5
    # 09:00 in Berlin (summer) is 03:00 in New York.
    assert "Tue 2026-07-07 09:00 CEST" in rows[0] and "Tue 2026-07-07 03:00 EDT" in rows[0]
    assert "Mon 2026-07-13 09:00 CEST" in rows[4]
    assert "In your zone (America/New_York)" in html


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"cron": "0 9 * * 8"}, "the day of week field &#x27;8&#x27; is not valid"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone &#x27;Mars/Olympus&#x27;"),
        ({"kind": "interval", "every": "abc"}, "Every (minutes): Enter a whole number."),
    ],
)
def test_the_preview_names_the_wrong_part(member, fields, says):
    html = client_for(member).get("/schedules/preview", CRON | fields).content.decode()
    assert 'id="preview-error"' in html and says in html, html
    assert not Schedule.objects.exists()


def test_the_preview_shows_a_hint_until_the_timing_is_typed(member):
    html = client_for(member).get("/schedules/preview", CRON | {"cron": ""}).content.decode()
    assert "The next fire times appear here." in html and "preview-error" not in html


def test_the_preview_needs_a_login():
    assert Client().get("/schedules/preview", CRON).status_code == 302


# --- scheduler, my schedules, time zone ----------------------------------------------------


def test_the_panel_says_when_schedules_will_not_fire(team_chat, member):
    html = client_for(member).get(panel_url(team_chat)).content.decode()
    assert 'id="scheduler-down"' in html and "No scheduler has ever run" in html
    heartbeat_beat(name=DISPATCHER_HEARTBEAT)
    html = client_for(member).get(panel_url(team_chat)).content.decode()
    assert 'id="scheduler-down"' not in html
    with freeze_time(T0):
        heartbeat_beat(name=DISPATCHER_HEARTBEAT, now=T0)
    with freeze_time(T0 + timedelta(minutes=10)):
        html = client_for(member).get("/schedules/").content.decode()
    assert "No scheduler has run for 10 minutes: schedules will not fire" in html


def test_my_schedules_lists_what_i_own_across_chats(make_schedule, team_chat, member, owner):
    other, _ = chat_get_or_create(channel="web", chat_id="ops", title="Ops")
    chat_member_ensure(chat=other, person=member, role=ChatMember.Role.OWNER)
    mine = make_schedule(person=member, prompt="In the team room")
    make_schedule(person=member, chat=other, prompt="In ops")
    make_schedule(person=owner, prompt="The owner's own")
    ScheduleRun.objects.create(schedule=mine, slot_at=T0, status=ScheduleRun.Status.MISSED)
    client = client_for(member)
    html = client.get("/schedules/").content.decode()
    assert "In the team room" in html and "In ops" in html
    assert "The owner's own" not in html
    assert 'href="/schedules/"' in html  # in the navigation
    # Removed from the team room: still listed (to delete it), without its run history.
    chat_member_remove(chat=team_chat, person_id=member.pk, by_role="owner")
    html = client.get("/schedules/").content.decode()
    entry = re.search(rf'id="schedule-{mine.pk}".*?</li>', html, re.DOTALL).group(0)
    assert "a chat you can no longer read" in entry and "data-runs" not in entry
    assert "Team room" not in entry
    assert client.get(f"/schedules/{mine.pk}/edit").status_code == 403
    assert action(client, mine, "run").status_code == 403
    assert client.post(f"/schedules/{mine.pk}/delete", {"back": "mine"}).status_code == 302
    assert not Schedule.objects.filter(pk=mine.pk).exists()


def test_a_person_sets_their_own_time_zone(team_chat, theirs, member, settings):
    settings.TIME_ZONE = "UTC"
    client = client_for(member)
    assert 'id="current-tz">UTC<' in client.get("/settings/time-zone/").content.decode()
    refused = client.post("/settings/time-zone/", {"timezone": "Europe/Berln"})
    assert refused.status_code == 400 and "did you mean Europe/Berlin" in refused.content.decode()
    assert client.post("/settings/time-zone/", {"timezone": "Asia/Tokyo"}).status_code == 302
    assert PersonPreference.objects.get(person=member).timezone == "Asia/Tokyo"
    with freeze_time(T0):
        html = client.get(panel_url(team_chat)).content.decode()
    # 09:00 in Berlin (07:00 UTC) is 16:00 in Tokyo.
    assert "In your zone (Asia/Tokyo)" in html and "Tue 2026-07-07 16:00 JST" in html
    # Empty: the site's zone again.
    client.post("/settings/time-zone/", {"timezone": ""})
    assert 'id="current-tz">UTC<' in client.get("/settings/time-zone/").content.decode()


def test_the_chat_page_links_to_its_schedules(team_chat, member):
    html = client_for(member).get(f"/chats/{team_chat.chat_key}/").content.decode()
    assert f'href="/chats/{team_chat.chat_key}/schedules"' in html


def test_the_pages_cost_the_same_queries_whatever_the_number_of_schedules(
    make_schedule, team_chat, member, colleague
):
    make_schedule(person=colleague)
    client = client_for(colleague)

    def queries(path) -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as captured:
            assert client.get(path).status_code == 200
        return len(captured)

    one = {path: queries(path) for path in (panel_url(team_chat), "/schedules/")}
    for n in range(4):
        schedule = make_schedule(person=member if n % 2 else colleague)
        ScheduleRun.objects.create(schedule=schedule, slot_at=T0, status="missed")
    assert {path: queries(path) for path in one} == one
