"""Fire times in a time zone across daylight saving, validation messages that name the wrong
part, and readable descriptions."""

from datetime import UTC, datetime

import pytest
from croniter import croniter

from schedules.timing import (
    ScheduleSpecError,
    Spec,
    describe,
    firing_days,
    next_fire_time,
    shortest_gap_minutes,
    slots_until,
    validate_cron,
    zone,
)

BERLIN = "Europe/Berlin"


def slots(cron: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    spec = Spec(kind="cron", cron=cron, tz=tz)
    return slots_until(spec, next_fire_time(spec, start), end)[0]


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_nine_in_berlin_is_seven_utc_in_july_and_eight_utc_in_january():
    assert next_fire_time(Spec("cron", "0 9 * * *", BERLIN), utc(2026, 7, 1)) == utc(2026, 7, 1, 7)
    assert next_fire_time(Spec("cron", "0 9 * * *", BERLIN), utc(2026, 1, 5)) == utc(2026, 1, 5, 8)


def test_nine_in_berlin_fires_exactly_once_on_both_transition_days():
    # 2026-03-29: clocks go 02:00 → 03:00; 2026-10-25: clocks go 03:00 → 02:00.
    spring = slots("0 9 * * *", BERLIN, utc(2026, 3, 28, 12), utc(2026, 3, 30, 12))
    assert spring == [utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]
    autumn = slots("0 9 * * *", BERLIN, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    assert autumn == [utc(2026, 10, 25, 8), utc(2026, 10, 26, 8)]


def test_half_past_two_runs_once_at_three_on_the_day_it_does_not_exist():
    fired = slots("30 2 * * *", BERLIN, utc(2026, 3, 28, 12), utc(2026, 3, 30, 12))
    # 03:00 CEST is 01:00 UTC; the days around it keep their 02:30.
    assert fired == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]
    assert fired[0].astimezone(zone(BERLIN)).strftime("%H:%M") == "03:00"


def test_half_past_two_runs_once_on_the_day_it_happens_twice():
    fired = slots("30 2 * * *", BERLIN, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    # The first 02:30 (CEST, 00:30 UTC); the second 02:30 (CET, 01:30 UTC) does not fire.
    assert fired == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    # Asked from inside the repeated hour, after the first 02:30: the next is tomorrow's.
    spec = Spec("cron", "30 2 * * *", BERLIN)
    assert next_fire_time(spec, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)


def test_wall_times_that_land_on_one_instant_are_one_slot():
    # Every 30 minutes on the spring-forward night: 02:00 and 02:30 do not exist and become
    # 03:00, the same instant as 03:00 itself.
    fired = slots("*/30 * * * *", BERLIN, utc(2026, 3, 29, 0, 15), utc(2026, 3, 29, 1, 45))
    assert fired == [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 30)]


def test_intervals_count_real_time_from_their_anchor():
    spec = Spec(kind="interval", interval_minutes=90, anchor=utc(2026, 3, 29, 0))
    assert slots_until(spec, next_fire_time(spec, utc(2026, 3, 29, 0)), utc(2026, 3, 29, 4))[0] == [
        utc(2026, 3, 29, 1, 30),
        utc(2026, 3, 29, 3),
    ]


def test_a_one_off_schedule_has_one_slot():
    spec = Spec(kind="once", run_at=utc(2026, 5, 1, 9))
    assert next_fire_time(spec, utc(2026, 4, 1)) == utc(2026, 5, 1, 9)
    assert next_fire_time(spec, utc(2026, 5, 1, 9)) is None


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("61 * * * *", "the minute field '61'"),
        ("0 25 * * *", "the hour field '25'"),
        ("0 9 32 * *", "the day of month field '32'"),
        ("0 9 * 13 *", "the month field '13'"),
        ("0 9 * * MONDAY", "the day of week field 'MONDAY'"),
        ("0 9 * *", "has 4 field(s); it needs 5"),
        ("0 0 9 * * *", "has 6 field(s)"),
        ("", "empty"),
    ],
)
def test_an_invalid_cron_expression_says_which_part_is_wrong(expression, says):
    with pytest.raises(ScheduleSpecError) as caught:
        validate_cron(expression)
    assert says in str(caught.value)


def test_an_unknown_time_zone_is_named_with_close_matches():
    with pytest.raises(ScheduleSpecError) as caught:
        zone("Europe/Berln")
    assert "unknown time zone 'Europe/Berln'" in str(caught.value)
    assert "Europe/Berlin" in str(caught.value)


def test_descriptions_are_readable():
    assert describe(Spec("cron", "0 9 * * 1-5", BERLIN)) == (
        "At 09:00, Monday through Friday (Europe/Berlin)"
    )
    assert describe(Spec(kind="interval", interval_minutes=120)) == "Every 2 hours"
    assert describe(Spec(kind="interval", interval_minutes=15)) == "Every 15 minutes"
    assert describe(Spec(kind="once", tz=BERLIN, run_at=utc(2026, 5, 1, 7))) == (
        "Once, at 2026-05-01 09:00 (Europe/Berlin)"
    )


@pytest.mark.parametrize(
    "days",
    ["* * *", "L * *", "* * L5", "15 * 1", "* * 1#2", "* 2 *", "29 2 *", "*/3 1-6 0,6",
     "13 * 5", "1,15 */2 *", "1W * *", "15W * 1", "* * 5#5", "31 * *", "L * 2", "2 * 1#1"],
)  # fmt: skip
def test_the_days_a_cron_expression_fires_are_croniters(days):
    """The minimum interval's walk over the calendar finds the days the dispatcher fires."""
    walked = list(firing_days(days, 2023, 3))
    fires = croniter(f"0 0 {days}", datetime(2022, 12, 31))
    expected = []
    while (day := fires.get_next(datetime)).year < 2026:
        expected.append(day.date().toordinal())
    assert walked == expected


@pytest.mark.parametrize(
    ("cron", "gap"),
    [
        ("* * * * *", 1),
        ("*/5 * * * *", None),  # exactly the minimum
        ("0,2 9 * * *", 2),
        ("0,58 * * * *", 2),  # :58, then the next hour's :00
        ("56 23 * * *", None),  # once a day
        ("0,56 0,23 * * 1,2", 4),  # Monday 23:56, then Tuesday 00:00
        ("0,56 0,23 * * 1,3", None),  # never two days in a row
        ("0,58 0,23 L * 1", 2),  # a month's last day, or a Monday: one follows the other
        ("0,59 0,23 31 12 *", None),  # 31 December, then 31 December a year later
        ("0,59 0,23 1,31 12,1 *", 1),  # 31 December 23:59, then 1 January 00:00
        ("0,59 0,23 29 2 *", None),  # leap days only
    ],
)
def test_the_shortest_gap_is_the_expressions_own(cron, gap):
    assert shortest_gap_minutes(cron, 5) == gap
