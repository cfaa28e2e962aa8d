"""Reads of schedules: a person sees the schedules of the chats they can read; the
scheduler's liveness is public to every page that shows schedules."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from chats.selectors import chats_readable_by
from operations.selectors import heartbeat_latest
from schedules.models import Schedule, ScheduleRun
from schedules.services import schedule_spec
from schedules.timing import describe, fire_times

# The dispatcher's name in the hub's heartbeats (`operations.models.Heartbeat`).
DISPATCHER_HEARTBEAT = "dispatcher"


def schedules_visible_to(person: AbstractBaseUser) -> QuerySet[Schedule]:
    """Schedules whose target chat `person` may read (none for anonymous or inactive)."""
    return Schedule.objects.filter(chat__in=chats_readable_by(person))


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
            "no scheduler has ever run: schedules will not fire until a worker with beat "
            "runs (celery worker -B, or celery beat)",
        )
    silent = now - beat
    if silent > stale_after:
        minutes = max(1, int(silent.total_seconds() // 60))
        return SchedulerStatus(
            False,
            beat,
            f"no scheduler has run for {minutes} minute{'s' if minutes != 1 else ''}: "
            "schedules will not fire until the worker with beat is back",
        )
    seconds = max(0, int(silent.total_seconds()))
    return SchedulerStatus(True, beat, f"the scheduler ran {seconds} s ago")
