"""Changes to schedules: create, change, pause, resume, delete, run now; and the zone a
person sees times in. Each checks who may (schedules.services.rights) under a row lock or
as a conditional update; only the owner changes a schedule's prompt (it is posted in their
name).
"""

from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from chats.models import Chat
from chats.services import IngestError, validate_text
from schedules.models import PersonPreference, Schedule, ScheduleRun
from schedules.services.rights import (
    OWNER_LOST_ACCESS,
    OWNER_MAY_NOT_POST,
    _check_approved,
    _may_manage,
    _refuse_unless_owner_may_post,
    owner_post_refusal,
)
from schedules.services.runs import RUN_NOW, schedule_run_start
from schedules.timing import (
    ScheduleSpecError,
    Spec,
    next_fire_time,
    shortest_gap_minutes,
    validate_cron,
    zone,
)

MAX_PROMPT_CHARS = 4000


def schedule_spec(schedule: Schedule) -> Spec:
    """The pure description of when `schedule` fires (schedules.timing)."""
    return Spec(
        kind=schedule.kind,
        cron=schedule.cron,
        tz=schedule.timezone,
        interval_minutes=schedule.interval_minutes,
        anchor=schedule.anchor_at,
        run_at=schedule.run_at,
    )


def _check_spec(*, kind: str, cron: str, tz: str, interval_minutes, run_at, now: datetime) -> Spec:
    zone(tz)
    minimum = settings.SCHEDULES_MIN_INTERVAL_MINUTES
    if kind == Schedule.Kind.CRON:
        spec = Spec(kind=kind, cron=validate_cron(cron), tz=tz)
        try:
            next_fire_time(spec, now)
        except Exception as exc:  # noqa: BLE001 - croniter: e.g. "0 0 30 2 *" never fires
            raise ScheduleSpecError("cron", f"cron expression {cron!r} never fires") from exc
        # The expression's own shortest gap: the same whenever the schedule is made.
        gap = shortest_gap_minutes(spec.cron, minimum)
        if gap is not None:
            raise ScheduleSpecError(
                "cron",
                f"cron expression {cron!r} has runs {gap} minute(s) apart; the minimum "
                f"interval is {minimum} (SCHEDULES_MIN_INTERVAL_MINUTES)",
            )
        return spec
    if kind == Schedule.Kind.INTERVAL:
        if not isinstance(interval_minutes, int) or isinstance(interval_minutes, bool):
            raise ScheduleSpecError("every", "the interval must be a whole number of minutes")
        if interval_minutes < minimum:
            raise ScheduleSpecError(
                "every",
                f"every {interval_minutes} minute(s) is too often: the minimum interval is "
                f"{minimum} (SCHEDULES_MIN_INTERVAL_MINUTES)",
            )
        return Spec(kind=kind, tz=tz, interval_minutes=interval_minutes, anchor=now)
    if kind == Schedule.Kind.ONCE:
        if not isinstance(run_at, datetime) or timezone.is_naive(run_at):
            raise ScheduleSpecError("at", "the time must be a date and time with its zone")
        if run_at <= now:
            raise ScheduleSpecError("at", f"{run_at.isoformat()} is in the past")
        return Spec(kind=kind, tz=tz, run_at=run_at)
    raise ScheduleSpecError("kind", "kind must be one of cron, interval, once")


def schedule_create(
    *,
    owner: AbstractBaseUser,
    chat: Chat,
    prompt: str,
    kind: str,
    cron: str = "",
    interval_minutes: int | None = None,
    run_at: datetime | None = None,
    tz: str = "",
    catch_up: str = Schedule.CatchUp.SKIP,
    mode: str = Schedule.Mode.CHAT,
) -> Schedule:
    """Create an enabled schedule owned by `owner` in `chat`: the owner must be an active
    person who can read the chat and under SCHEDULES_MAX_PER_PERSON; the timing is checked
    (ScheduleSpecError names the wrong part) and its first slot computed."""
    problem = owner_post_refusal(owner, chat)
    if problem == OWNER_LOST_ACCESS:
        raise PermissionDenied("The owner of a schedule must be an active member of its chat.")
    if problem:
        reason = problem.removeprefix(OWNER_MAY_NOT_POST)
        raise PermissionDenied(f"The owner of a schedule must be allowed to post there: {reason}.")
    prompt = _clean_prompt(prompt)
    _check_choices(catch_up=catch_up, mode=mode)
    tz = tz or settings.TIME_ZONE
    now = timezone.now()
    spec = _check_spec(
        kind=kind, cron=cron, tz=tz, interval_minutes=interval_minutes, run_at=run_at, now=now
    )
    with transaction.atomic():
        # Lock the owner's row: two creations at once cannot both pass the limit.
        get_user_model()._default_manager.select_for_update().filter(pk=owner.pk).first()
        count = Schedule.objects.filter(owner=owner).count()
        if count >= settings.SCHEDULES_MAX_PER_PERSON:
            raise ScheduleSpecError(
                "owner",
                f"{owner.get_username()} already has {count} schedules, the most one person may "
                f"have (SCHEDULES_MAX_PER_PERSON)",
            )
        return Schedule.objects.create(
            owner=owner,
            chat=chat,
            prompt=prompt,
            kind=kind,
            cron=spec.cron,
            interval_minutes=spec.interval_minutes,
            run_at=spec.run_at,
            timezone=tz,
            anchor_at=now,
            catch_up=catch_up,
            mode=mode,
            next_fire_at=next_fire_time(spec, now),
            created_at=now,
        )


def validate_spec(
    *,
    kind: str,
    cron: str = "",
    tz: str = "",
    interval_minutes: int | None = None,
    run_at: datetime | None = None,
    now: datetime | None = None,
) -> Spec:
    """The timing a schedule would have, checked as `schedule_create` checks it (a preview
    shows the same ScheduleSpecError messages); writes nothing."""
    return _check_spec(
        kind=kind,
        cron=cron,
        tz=tz or settings.TIME_ZONE,
        interval_minutes=interval_minutes,
        run_at=run_at,
        now=now or timezone.now(),
    )


def _clean_prompt(prompt: str) -> str:
    try:
        prompt = validate_text(prompt, "prompt").strip()
    except IngestError as exc:
        raise ScheduleSpecError("prompt", str(exc)) from exc
    if not prompt:
        raise ScheduleSpecError("prompt", "the prompt is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ScheduleSpecError("prompt", f"the prompt is over {MAX_PROMPT_CHARS} characters")
    return prompt


def _check_choices(*, catch_up: str, mode: str) -> None:
    if catch_up not in Schedule.CatchUp.values:
        raise ScheduleSpecError("catch_up", "catch-up must be skip or once")
    if mode not in Schedule.Mode.values:
        raise ScheduleSpecError("mode", "mode must be chat or isolated")


TIMING_FIELDS = ("kind", "cron", "interval_minutes", "run_at", "timezone")
UNSET = object()


def schedule_update(
    *,
    schedule: Schedule,
    by: AbstractBaseUser | None = None,
    prompt=UNSET,
    kind=UNSET,
    cron=UNSET,
    interval_minutes=UNSET,
    run_at=UNSET,
    tz=UNSET,
    catch_up=UNSET,
    mode=UNSET,
) -> Schedule:
    """Change what a schedule asks, when, in which zone, its catch-up policy or mode; only
    the arguments given change. Who may: as for pausing (its owner, the chat's owners and
    admins, staff), except the prompt, which only its owner changes: a run posts it as
    "scheduled by <owner>", so nobody else puts words there under the owner's name.

    A change of timing is checked as at creation (ScheduleSpecError names the wrong part)
    and the next slot is computed again from now (an interval counts from now); runs
    already recorded stay as they are. Changing only the prompt, zone-free fields or mode
    keeps the slots."""
    if not _may_manage(by, schedule):
        raise PermissionDenied("Only its owner, the chat's admins and staff change a schedule.")
    changes: dict = {}
    if prompt is not UNSET:
        prompt = _clean_prompt(prompt)
        if prompt != schedule.prompt:
            if by is not None and by.pk != schedule.owner_id:
                raise PermissionDenied(
                    "Only its owner changes what a schedule asks: it is posted in their name."
                )
            _refuse_unless_owner_may_post(schedule)
            changes["prompt"] = prompt
    _check_choices(
        catch_up=schedule.catch_up if catch_up is UNSET else catch_up,
        mode=schedule.mode if mode is UNSET else mode,
    )
    if catch_up is not UNSET:
        changes["catch_up"] = catch_up
    if mode is not UNSET:
        changes["mode"] = mode
    timing = {
        "kind": schedule.kind if kind is UNSET else kind,
        "cron": schedule.cron if cron is UNSET else (cron or ""),
        "interval_minutes": (
            schedule.interval_minutes if interval_minutes is UNSET else interval_minutes
        ),
        "run_at": schedule.run_at if run_at is UNSET else run_at,
        "timezone": schedule.timezone if tz is UNSET else (tz or settings.TIME_ZONE),
    }
    # Fields of another kind are cleared, so a schedule never carries a stale cron or time.
    if timing["kind"] != Schedule.Kind.CRON:
        timing["cron"] = ""
    if timing["kind"] != Schedule.Kind.INTERVAL:
        timing["interval_minutes"] = None
    if timing["kind"] != Schedule.Kind.ONCE:
        timing["run_at"] = None
    now = timezone.now()
    if any(timing[name] != getattr(schedule, name) for name in TIMING_FIELDS):
        spec = _check_spec(
            kind=timing["kind"],
            cron=timing["cron"],
            tz=timing["timezone"],
            interval_minutes=timing["interval_minutes"],
            run_at=timing["run_at"],
            now=now,
        )
        changes.update(
            kind=spec.kind,
            cron=spec.cron,
            interval_minutes=spec.interval_minutes,
            run_at=spec.run_at,
            timezone=timing["timezone"],
            anchor_at=now,
            next_fire_at=next_fire_time(spec, now),
        )
    if changes:
        changes["updated_at"] = now
        Schedule.objects.filter(pk=schedule.pk).update(**changes)
        schedule.refresh_from_db()
    return schedule


def schedule_delete(*, schedule: Schedule, by: AbstractBaseUser | None = None) -> None:
    """Delete a schedule and its run records (same rule as pausing). What its runs posted
    stays in the chat, as any message does; a run under way finishes its turn, and its
    outcome is then recorded nowhere."""
    if not _may_manage(by, schedule):
        raise PermissionDenied("Only its owner, the chat's admins and staff delete a schedule.")
    Schedule.objects.filter(pk=schedule.pk).delete()


def schedule_pause(*, schedule: Schedule, reason: str, by: AbstractBaseUser | None = None) -> bool:
    """Pause a schedule, saying why (its slots are not claimed while paused); False if it
    was already paused."""
    if not _may_manage(by, schedule):
        raise PermissionDenied("Only its owner, the chat's admins and staff pause a schedule.")
    updated = Schedule.objects.filter(pk=schedule.pk, enabled=True).update(
        enabled=False, paused_reason=reason[:255], paused_at=timezone.now()
    )
    schedule.refresh_from_db()
    return bool(updated)


def schedule_resume(*, schedule: Schedule, by: AbstractBaseUser | None = None) -> bool:
    """Enable a paused schedule from now on: slots during the pause are not run or recorded,
    the failure count starts again. The owner must still be able to read the chat."""
    if not _may_manage(by, schedule):
        raise PermissionDenied("Only its owner, the chat's admins and staff resume a schedule.")
    _check_approved(schedule)
    _refuse_unless_owner_may_post(schedule)
    now = timezone.now()
    updated = Schedule.objects.filter(pk=schedule.pk, enabled=False).update(
        enabled=True,
        paused_reason="",
        paused_at=None,
        consecutive_failures=0,
        next_fire_at=next_fire_time(schedule_spec(schedule), now),
    )
    schedule.refresh_from_db()
    return bool(updated)


def schedule_run_now(*, schedule: Schedule, by: AbstractBaseUser | None = None) -> ScheduleRun:
    """Record a run for now outside the schedule's slots and start it if the chat is free
    (else it waits, `due`, like any run). Its slot is this instant: it never takes the place
    of a scheduled slot. While an earlier "run now" of the schedule is still due or running,
    another is refused (ScheduleSpecError, field `run`)."""
    if not _may_manage(by, schedule):
        raise PermissionDenied("Only its owner, the chat's admins and staff run a schedule.")
    _check_approved(schedule)
    _refuse_unless_owner_may_post(schedule)
    with transaction.atomic():
        # One "run now" of a schedule at a time (a button pressed again and again queues
        # no pile of turns): its row lock makes two presses at once see each other.
        Schedule.objects.select_for_update().filter(pk=schedule.pk).first()
        open_run = (
            ScheduleRun.objects.filter(
                schedule=schedule,
                claim_token=RUN_NOW,
                status__in=(ScheduleRun.Status.DUE, ScheduleRun.Status.RUNNING),
            )
            .values_list("pk", flat=True)
            .first()
        )
        if open_run is not None:
            raise ScheduleSpecError(
                "run",
                f"run {open_run} of this schedule, asked for now, is still waiting or under "
                "way: run it again once it has finished",
            )
        run = ScheduleRun.objects.create(
            schedule=schedule, slot_at=timezone.now(), reason="run now", claim_token=RUN_NOW
        )
    schedule_run_start(run_id=run.pk)
    run.refresh_from_db()
    return run


def person_timezone_set(*, person: AbstractBaseUser, tz: str) -> str:
    """Set the zone `person` sees times in (an IANA name, checked like a schedule's; empty:
    the site's TIME_ZONE again). Each person sets only their own."""
    tz = (tz or "").strip()
    if tz:
        zone(tz)
    PersonPreference.objects.update_or_create(person=person, defaults={"timezone": tz})
    return tz or settings.TIME_ZONE
