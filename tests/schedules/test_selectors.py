"""What pages and the command show about a schedule: its description, its next fire times
(none while paused) and its last run."""

from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from schedules.dispatch import dispatch
from schedules.selectors import (
    schedule_description,
    schedule_next_fire_times,
    schedules_with_last_run,
)
from schedules.services import schedule_pause
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db


def test_the_next_five_fire_times_follow_the_zone_across_a_clock_change(make_schedule):
    schedule = make_schedule(cron="0 9 * * *", tz="Europe/Berlin")
    assert schedule_description(schedule) == "At 09:00 (Europe/Berlin)"
    with freeze_time(datetime(2026, 10, 23, 12, tzinfo=UTC)):
        times = schedule_next_fire_times(schedule)
    assert [t.strftime("%m-%d %H:%M") for t in times] == [
        "10-24 07:00",
        "10-25 08:00",
        "10-26 08:00",
        "10-27 08:00",
        "10-28 08:00",
    ]
    schedule_pause(schedule=schedule, reason="quiet week")
    assert schedule_next_fire_times(schedule) == []


def test_the_operators_list_carries_each_schedules_last_run(make_schedule):
    first, second = make_schedule(), make_schedule(catch_up="skip")
    dispatch(now=T0 + timedelta(hours=2, minutes=30))  # both: 07 and 08 missed
    rows = {row.pk: row for row in schedules_with_last_run()}
    assert rows[first.pk].last_status == "missed"
    assert rows[first.pk].last_slot_at == T0 + timedelta(hours=2)
    assert rows[second.pk].last_status == "missed"
