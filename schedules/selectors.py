"""Reads of schedules: a person sees the schedules of the chats they can read; the
scheduler's liveness is public to every page that shows schedules."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Exists, F, OuterRef, QuerySet, Subquery, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from chats.selectors import chats_readable_by
from schedules.heartbeat import heartbeat_latest
from schedules.models import PersonPreference, Schedule, ScheduleRun
from schedules.services import schedule_spec, validate_spec
from schedules.timing import describe, fire_times

# The dispatcher's name in the hub's heartbeats (`operations.models.Heartbeat`).
DISPATCHER_HEARTBEAT = "dispatcher"


def schedules_visible_to(person: AbstractBaseUser) -> QuerySet[Schedule]:
    """Schedules whose target chat `person` may read (none for anonymous or inactive)."""
    return Schedule.objects.filter(chat__in=chats_readable_by(person))


def schedules_of_chat(chat) -> QuerySet[Schedule]:
    """A chat's schedules with their owners, oldest first (callers check who may see them)."""
    return Schedule.objects.filter(chat=chat).select_related("owner", "chat").order_by("id")


def schedules_owned_by(person: AbstractBaseUser) -> QuerySet[Schedule]:
    """The schedules `person` owns across chats, with their chats, each annotated with
    `chat_readable`: whether the person can still read its chat (if not, pages show its
    state but not its run history)."""
    readable = chats_readable_by(person).filter(pk=OuterRef("chat_id"))
    return (
        Schedule.objects.filter(owner=person)
        .select_related("owner", "chat")
        .annotate(chat_readable=Exists(readable))
        .order_by("chat__title", "chat__chat_key", "id")
    )


def schedule_recent_runs(schedule_ids: list[int], per_schedule: int = 10) -> dict[int, list]:
    """The newest `per_schedule` runs of each schedule, in one query, by schedule id."""
    ranked = (
        ScheduleRun.objects.filter(schedule_id__in=schedule_ids)
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("schedule_id")],
                order_by=[F("slot_at").desc(), F("id").desc()],
            )
        )
        .filter(rank__lte=per_schedule)
        .order_by("schedule_id", "-slot_at", "-id")
    )
    runs: dict[int, list] = {pk: [] for pk in schedule_ids}
    for run in ranked:
        runs[run.schedule_id].append(run)
    return runs


def person_timezone(person: AbstractBaseUser | None) -> str:
    """The IANA zone `person` sees times in: their preference, else the site's TIME_ZONE."""
    if person is None or not person.is_authenticated:
        return settings.TIME_ZONE
    tz = PersonPreference.objects.filter(person=person).values_list("timezone", flat=True).first()
    return tz or settings.TIME_ZONE


def schedules_with_last_run() -> QuerySet[Schedule]:
    """Every schedule (for operators) with its chat, owner and its newest run's status,
    slot and error annotated (`last_status`, `last_slot_at`, `last_error`)."""
    newest = ScheduleRun.objects.filter(schedule=OuterRef("pk")).order_by("-slot_at", "-id")
    return (
        Schedule.objects.select_related("chat", "owner")
        .annotate(
            last_status=Subquery(newest.values("status")[:1]),
            last_slot_at=Subquery(newest.values("slot_at")[:1]),
            last_error=Subquery(newest.values("error")[:1]),
        )
        .order_by("id")
    )


def schedule_description(schedule: Schedule) -> str:
    """ "At 09:00, Monday through Friday (Europe/Berlin)"."""
    return describe(schedule_spec(schedule))


def schedule_next_fire_times(schedule: Schedule, count: int = 5) -> list[datetime]:
    """The next `count` slots after now, as aware UTC datetimes (none while paused)."""
    if not schedule.enabled:
        return []
    times = []
    for instant in fire_times(schedule_spec(schedule), timezone.now()):
        times.append(instant)
        if len(times) >= count:
            break
    return times


def timing_preview(
    *, kind: str, cron: str = "", tz: str = "", interval_minutes=None, run_at=None, count=5
) -> tuple[str, list[datetime]]:
    """What a schedule with this timing would do, before it exists: its readable
    description and next `count` slots (aware UTC). Checked as at creation: an invalid
    timing raises the same ScheduleSpecError, naming the wrong part."""
    now = timezone.now()
    spec = validate_spec(
        kind=kind, cron=cron, tz=tz, interval_minutes=interval_minutes, run_at=run_at, now=now
    )
    times = []
    for instant in fire_times(spec, now):
        times.append(instant)
        if len(times) >= count:
            break
    return describe(spec), times


@dataclass(frozen=True)
class SchedulerStatus:
    alive: bool
    last_beat_at: datetime | None
    message: str


def scheduler_status(now: datetime | None = None) -> SchedulerStatus:
    """Whether a dispatcher ran recently, in words a page, a command or a tool can show:
    nothing reports schedules as working while no dispatcher runs."""
    now = now or timezone.now()
    beat = heartbeat_latest(name=DISPATCHER_HEARTBEAT)
    stale_after = timedelta(seconds=max(60.0, 6 * settings.SCHEDULES_DISPATCH_SECONDS))
    if beat is None:
        return SchedulerStatus(
            False,
            None,
            "no scheduler has ever run: schedules will not fire until celery beat and the "
            "schedules worker run (a worker on the schedules queue; `make run` starts both)",
        )
    silent = now - beat
    if silent > stale_after:
        minutes = max(1, int(silent.total_seconds() // 60))
        return SchedulerStatus(
            False,
            beat,
            f"no scheduler has run for {minutes} minute{'s' if minutes != 1 else ''}: "
            "schedules will not fire until beat and the schedules worker are back",
        )
    seconds = max(0, int(silent.total_seconds()))
    return SchedulerStatus(True, beat, f"the scheduler ran {seconds} s ago")
