"""`manage.py schedule add | list | run-now`: through the services, so the owner rule, the
limits and the validation messages apply at the command line too."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from schedules.dispatch import heartbeat_write
from schedules.models import Schedule, ScheduleRun

pytestmark = pytest.mark.django_db


def schedule(*args) -> str:
    out = StringIO()
    call_command("schedule", *args, stdout=out)
    return out.getvalue()


def test_add_list_and_run_now(team_chat, member):
    out = schedule(
        "add",
        "--chat",
        "web:team-room",
        "--owner",
        "marco",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--prompt",
        "Post the open incidents",
    )
    created = Schedule.objects.get()
    assert out.startswith(f"schedule {created.pk}: At 09:00, Monday through Friday")
    assert created.owner == member and created.timezone == "Europe/Berlin"
    listing = schedule("list")
    # No dispatcher has run in this test: the list says so before anything else.
    assert listing.startswith("WARNING: no scheduler has ever run")
    assert "web:team-room\tmarco\tAt 09:00, Monday through Friday (Europe/Berlin)" in listing
    assert "never ran" in listing
    out = schedule("run-now", str(created.pk))
    run = ScheduleRun.objects.get()
    assert out == f"run {run.pk} started: turn {run.turn_id}\n"
    heartbeat_write(run.created_at)
    listing = schedule("list")
    assert "WARNING" not in listing and "last run" in listing and ": running" in listing


def test_every_and_at_make_interval_and_one_off_schedules(team_chat, owner):
    schedule(
        "add", "--chat", "web:team-room", "--owner", "olivia", "--every", "30", "--prompt", "ping"
    )
    schedule(
        "add",
        "--chat",
        "web:team-room",
        "--owner",
        "olivia",
        "--at",
        "2099-01-01T09:00",
        "--tz",
        "Europe/Berlin",
        "--prompt",
        "happy new year",
    )
    interval, once = Schedule.objects.order_by("id")
    assert (interval.kind, interval.interval_minutes) == ("interval", 30)
    assert once.kind == "once" and once.run_at.isoformat() == "2099-01-01T08:00:00+00:00"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--owner", "oscar", "--cron", "0 9 * * *"], "must be an active member of its chat"),
        (["--owner", "olivia", "--cron", "0 9 * * 8"], "the day of week field '8'"),
        (["--owner", "olivia", "--cron", "0 9 * * *", "--tz", "Berlin"], "unknown time zone"),
        (["--owner", "nobody", "--cron", "0 9 * * *"], "No person with username 'nobody'"),
        (["--owner", "olivia", "--at", "tomorrow"], "is not an ISO date and time"),
    ],
)
def test_refusals_say_why(team_chat, outsider, args, says):
    with pytest.raises(CommandError) as caught:
        schedule("add", "--chat", "web:team-room", "--prompt", "hi", *args)
    assert says in str(caught.value)
    assert not Schedule.objects.exists()
