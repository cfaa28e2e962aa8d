"""Fire times: cron expressions in an IANA time zone, intervals, one-off times.

Cron expressions are wall-clock times in the schedule's zone. They are iterated on naive
wall-clock datetimes (croniter) and each wall time is then placed on the UTC line with
`zoneinfo`, which decides daylight saving:

- a wall time that does not exist (spring forward: 02:30 on the last Sunday of March in
  Europe/Berlin) fires at the first instant after the gap (03:00 local), once;
- a wall time that happens twice (fall back: 02:30 on the last Sunday of October) fires at
  its first occurrence, once;
- two wall times that land on the same instant (02:00 and 03:00 on the spring-forward day)
  are one slot.

Intervals are real elapsed time from the schedule's anchor (the time zone plays no part);
a one-off schedule has the single slot `run_at`. Every function here is pure.
"""

import difflib
from calendar import monthrange
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cron_descriptor import get_description
from croniter import croniter

CRON_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day of week", "0-6 or SUN-SAT"),
)
# A catch-up never records more slots than this at once (a minutely schedule across a week
# of downtime); the record of the oldest slot says how many earlier ones there were.
MAX_SLOTS_PER_PASS = 500


class ScheduleSpecError(ValueError):
    """A schedule that cannot be used; the message says which part is wrong and why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Spec:
    """When a schedule fires: kind `cron` (cron + tz), `interval` (minutes from anchor) or
    `once` (run_at)."""

    kind: str
    cron: str = ""
    tz: str = "UTC"
    interval_minutes: int | None = None
    anchor: datetime | None = None
    run_at: datetime | None = None


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name`, or ScheduleSpecError naming the closest known zones."""
    if not isinstance(name, str) or not name or name != name.strip() or "\x00" in name:
        raise ScheduleSpecError("tz", f"unknown time zone {name!r}: use an IANA name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        close = difflib.get_close_matches(name, sorted(_zone_names()), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ", e.g. Europe/Berlin"
        raise ScheduleSpecError(
            "tz", f"unknown time zone {name!r}: use an IANA name{hint}"
        ) from None


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def validate_cron(expression: str) -> str:
    """The expression, normalised to single spaces, or ScheduleSpecError naming the field
    that is wrong (five fields: minute hour day-of-month month day-of-week)."""
    if not isinstance(expression, str) or not expression.strip():
        raise ScheduleSpecError("cron", "the cron expression is empty")
    fields = expression.split()
    if len(fields) != 5:
        raise ScheduleSpecError(
            "cron",
            f"cron expression {expression!r} has {len(fields)} field(s); it needs 5: "
            "minute hour day-of-month month day-of-week (no seconds field)",
        )
    for index, (name, allowed) in enumerate(CRON_FIELDS):
        probe = ["*"] * 5
        probe[index] = fields[index]
        if not croniter.is_valid(" ".join(probe)):
            raise ScheduleSpecError(
                "cron",
                f"cron expression {expression!r}: the {name} field {fields[index]!r} is not "
                f"valid (allowed: {allowed}, with * , - /)",
            )
    normalised = " ".join(fields)
    if not croniter.is_valid(normalised):
        raise ScheduleSpecError("cron", f"cron expression {expression!r} is not valid")
    return normalised


def to_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of a naive wall-clock time in `tz` (see the module doc for DST)."""
    if _exists(wall, tz):
        return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    # In a gap: the first instant after it is the transition, the first wall time that exists.
    probe = wall.replace(second=0, microsecond=0)
    for _ in range(24 * 60):
        probe += timedelta(minutes=1)
        if _exists(probe, tz):
            return probe.replace(tzinfo=tz, fold=0).astimezone(UTC)
    raise ScheduleSpecError("tz", f"{tz.key} has no wall time after {wall:%Y-%m-%d %H:%M}")


def _exists(wall: datetime, tz: ZoneInfo) -> bool:
    round_trip = wall.replace(tzinfo=tz, fold=0).astimezone(UTC).astimezone(tz)
    return round_trip.replace(tzinfo=None) == wall


def fire_times(spec: Spec, after: datetime) -> Iterator[datetime]:
    """The slots strictly after `after` (aware), ascending, as aware UTC datetimes."""
    after = after.astimezone(UTC)
    if spec.kind == "once":
        if spec.run_at is not None and spec.run_at > after:
            yield spec.run_at.astimezone(UTC)
        return
    if spec.kind == "interval":
        step = timedelta(minutes=spec.interval_minutes)
        anchor = spec.anchor.astimezone(UTC)
        count = 0 if after < anchor else (after - anchor) // step + 1
        while True:
            yield anchor + count * step
            count += 1
    tz = zone(spec.tz)
    # Start a day early in wall time: a fall-back hour can put `after` before its wall time.
    walls = croniter(spec.cron, after.astimezone(tz).replace(tzinfo=None) - timedelta(days=1))
    last = None
    while True:
        instant = to_instant(walls.get_next(datetime), tz)
        if instant <= after or instant == last:
            continue
        last = instant
        yield instant


def next_fire_time(spec: Spec, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, or None (a one-off schedule that has fired)."""
    return next(fire_times(spec, after), None)


def slots_until(spec: Spec, first: datetime, now: datetime) -> tuple[list[datetime], int]:
    """The slots from `first` (itself a slot) up to `now` inclusive, at most
    MAX_SLOTS_PER_PASS of the newest, and how many older ones were left out."""
    slots: list[datetime] = []
    dropped = 0
    current: datetime | None = first
    while current is not None and current <= now:
        slots.append(current)
        if len(slots) > MAX_SLOTS_PER_PASS:
            slots.pop(0)
            dropped += 1
        current = next_fire_time(spec, current)
    return slots, dropped


def shortest_gap_minutes(cron: str, below: int) -> int | None:
    """The shortest time between two slots of the cron expression `cron`, in minutes, if
    it is shorter than `below`, else None: to hold cron schedules to the minimum interval.

    Reasoned from the expression, not sampled from a moment, so the answer is the same
    whenever it is asked: every day that fires has the same times (minute × hour), so the
    shortest gap is the shortest between two times of a day, or from a day's last time to
    the first time of the next day that fires (that one only when the two times lie closer
    across midnight than within a day: then the days that fire are scanned once). Wall
    clock time: a run moved by a daylight saving change (module doc) is not counted."""
    minutes, hours = croniter(cron).expanded[:2]
    minutes = range(60) if minutes == ["*"] else minutes
    hours = range(24) if hours == ["*"] else hours
    times = sorted({hour * 60 + minute for hour in hours for minute in minutes})
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    within = min(gaps) if gaps else None
    across_midnight = 24 * 60 - times[-1] + times[0]  # to the first time of the next day
    if across_midnight < below and (within is None or across_midnight < within):
        days = _closest_days(" ".join(cron.split()[2:]))
        if days is not None:
            across = (days - 1) * 24 * 60 + across_midnight
            within = across if within is None else min(within, across)
    return within if within is not None and within < below else None


# The Gregorian calendar repeats every 28 years from 1901 to 2099 (weekdays and leap years).
_CALENDAR_FROM, _CALENDAR_YEARS = 2001, 28


@lru_cache(maxsize=256)
def _closest_days(day_fields: str) -> int | None:
    """The fewest days between two days on which the cron day fields (day of month, month,
    day of week) fire, over one full cycle of the calendar; None if fewer than two do."""
    closest, last = None, None
    for ordinal in firing_days(day_fields, _CALENDAR_FROM, _CALENDAR_YEARS):
        if last is not None:
            closest = ordinal - last if closest is None else min(closest, ordinal - last)
            if closest == 1:
                return 1
        last = ordinal
    return closest


def firing_days(day_fields: str, first_year: int, years: int) -> Iterator[int]:
    """The days (as date ordinals) of `years` years from `first_year` on which the cron day
    fields (day of month, month, day of week) fire, as croniter decides them: days of the
    month with `L`, weekdays with `#n` and `L`, and either field enough when both are
    restricted. Plain arithmetic per day, fast enough to walk the calendar's whole cycle."""
    expression = croniter(f"0 0 {day_fields}")
    doms, months, weekdays = expression.expanded[2:5]
    nth = expression.nth_weekday_of_month
    # A nearest weekday (`15W`), or a day of the month beside an nth weekday (`2 * 1#1`,
    # where croniter has rules of its own): rare, a few days a month, croniter walks them.
    if expression.nearest_weekday or (nth and doms != ["*"]):
        start, end = date(first_year, 1, 1), date(first_year + years, 1, 1)
        days = croniter(f"0 0 {day_fields}", datetime(first_year - 1, 12, 31))
        while (day := days.get_next(datetime).date()) < end:
            if day >= start:
                yield day.toordinal()
        return
    any_dom, any_weekday = doms == ["*"], weekdays == ["*"]
    either = not any_dom and not any_weekday  # croniter's day_or, as the dispatcher uses it
    months = range(1, 13) if months == ["*"] else sorted(months)
    doms, weekdays = set(doms), set(weekdays)
    for year in range(first_year, first_year + years):
        for month in months:
            first_weekday, length = monthrange(year, month)  # Monday is 0 here
            base = date(year, month, 1).toordinal() - 1
            for day in range(1, length + 1):
                dom = any_dom or day in doms or ("l" in doms and day == length)
                weekday = (first_weekday + day) % 7  # cron's: Sunday is 0
                dow = any_weekday or (
                    weekday in weekdays
                    and (
                        weekday not in nth
                        or (day - 1) // 7 + 1 in nth[weekday]
                        or ("l" in nth[weekday] and day + 7 > length)
                    )
                )
                if (dom or dow) if either else (dom and dow):
                    yield base + day


def describe(spec: Spec) -> str:
    """A readable description: "At 09:00, Monday through Friday (Europe/Berlin)"."""
    if spec.kind == "cron":
        try:
            text = get_description(spec.cron)
        except Exception:  # noqa: BLE001 - a description must never break a page
            text = spec.cron
        return f"{text} ({spec.tz})"
    if spec.kind == "interval":
        minutes = spec.interval_minutes
        if minutes % 60 == 0:
            hours = minutes // 60
            return "Every hour" if hours == 1 else f"Every {hours} hours"
        return "Every minute" if minutes == 1 else f"Every {minutes} minutes"
    local = spec.run_at.astimezone(zone(spec.tz))
    return f"Once, at {local:%Y-%m-%d %H:%M} ({spec.tz})"
