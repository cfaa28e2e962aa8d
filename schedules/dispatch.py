"""The dispatcher: one pass claims the due slots of every schedule, starts the runs whose
chat is free, settles runs whose turn ended unannounced, and writes the heartbeat.

Exactly once: a slot is claimed by inserting its ScheduleRun row; the unique constraint on
(schedule, slot) makes a second insert of the same slot a no-op (INSERT ... ON CONFLICT DO
NOTHING on PostgreSQL and SQLite), so two dispatchers at once, or a beat restarted on a
slot boundary, record and start each slot once. Each pass tags its inserts with a token and
reads back only the rows it inserted. The fire times are computed before any write, with no
lock held; `next_fire_at` only saves work (a dispatcher that writes back an older value
makes the next pass recompute slots that are already claimed, which inserts nothing).

Catch-up: a slot seen more than SCHEDULES_LATE_AFTER_SECONDS after its time (the hub was
down) is missed. Policy `skip` records each as `missed`; policy `once` records them as
`missed`, covered by one run: the next on-time slot if one is due now, else the newest
missed slot, run late.
"""

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from chats.models import Turn
from chats.selectors import chat_posters
from schedules.heartbeat import heartbeat_beat
from schedules.models import Schedule, ScheduleRun
from schedules.rows import update_rows
from schedules.selectors import DISPATCHER_HEARTBEAT
from schedules.services import (
    OPEN_TURN,
    OWNER_LOST_ACCESS,
    owner_post_refusal,
    schedule_pause_owner_may_not_post,
    schedule_run_fail,
    schedule_run_settle,
    schedule_run_start,
    schedule_runs_start,
    schedule_spec,
)
from schedules.timing import next_fire_time, slots_until

logger = logging.getLogger(__name__)

BATCH = 1000
# Runs started per transaction: its queries are constant, its rows grow with it (a chunk's
# transaction holds SQLite's write lock, so it is kept short).
START_CHUNK = 200


@dataclass
class DispatchResult:
    claimed: int = 0
    missed: int = 0
    started: int = 0
    waiting: int = 0
    settled: int = 0
    paused: int = 0
    errors: list[str] = field(default_factory=list)


def heartbeat_write(now: datetime) -> None:
    """Say that a dispatcher ran at `now` (read by `schedules.selectors.scheduler_status`),
    through the one heartbeat mechanism of the hub (`operations`)."""
    heartbeat_beat(name=DISPATCHER_HEARTBEAT, now=now)


def plan_runs(schedule: Schedule, now: datetime, token: str) -> tuple[list[ScheduleRun], datetime]:
    """The run rows for the slots of `schedule` from its next_fire_at up to `now`, and its
    next slot after `now`. Pure computation: nothing is read or written."""
    spec = schedule_spec(schedule)
    slots, dropped = slots_until(spec, schedule.next_fire_at, now)
    late = timedelta(seconds=settings.SCHEDULES_LATE_AFTER_SECONDS)
    missed = [slot for slot in slots if now - slot > late]
    on_time = [slot for slot in slots if now - slot <= late]
    rows = []

    def row(slot, status, reason=""):
        return ScheduleRun(
            schedule_id=schedule.pk,
            slot_at=slot,
            status=status,
            reason=reason[:255],
            claim_token=token,
            created_at=now,
            finished_at=now if status == ScheduleRun.Status.MISSED else None,
        )

    down = "the hub was not running at this time"
    if schedule.catch_up == Schedule.CatchUp.ONCE and missed:
        # One run for all of them: the next on-time slot if there is one, else the newest
        # missed slot runs late.
        if on_time:
            covering, covered = on_time[0], missed
        else:
            covering, covered = missed[-1], missed[:-1]
            count = len(missed) + dropped
            note = f"catch-up run for {count} missed slot(s)" if count > 1 else "late"
            rows.append(row(covering, ScheduleRun.Status.DUE, note))
        rows += [
            row(
                slot,
                ScheduleRun.Status.MISSED,
                f"{down}; covered by the run at {covering:%H:%M} UTC",
            )
            for slot in covered
        ]
    else:
        rows += [row(slot, ScheduleRun.Status.MISSED, down) for slot in missed]
    rows += [row(slot, ScheduleRun.Status.DUE) for slot in on_time]
    if dropped and rows:
        rows[0].reason = f"{rows[0].reason} (and {dropped} earlier slot(s) not recorded)"[:255]
    following = next_fire_time(spec, slots[-1]) if slots else schedule.next_fire_at
    return rows, following


def claim_due_slots(now: datetime, *, batch: int = BATCH) -> tuple[list[ScheduleRun], int]:
    """Insert the run rows of every due slot (each slot once, whoever else is dispatching)
    and advance the schedules' next_fire_at; returns the rows this pass inserted and how
    many were missed."""
    due = list(
        Schedule.objects.filter(enabled=True, next_fire_at__lte=now)
        .order_by("next_fire_at")
        .only(
            "id",
            "kind",
            "cron",
            "timezone",
            "interval_minutes",
            "anchor_at",
            "run_at",
            "catch_up",
            "next_fire_at",
        )[:batch]
    )
    if not due:
        return [], 0
    token = uuid.uuid4().hex
    rows: list[ScheduleRun] = []
    for schedule in due:
        try:
            planned, schedule.next_fire_at = plan_runs(schedule, now, token)
        except Exception:  # noqa: BLE001 - one broken schedule must not stop the others
            logger.exception("schedule %s: cannot compute its slots; paused", schedule.pk)
            Schedule.objects.filter(pk=schedule.pk).update(
                enabled=False, paused_at=now, paused_reason="its fire times cannot be computed"
            )
            schedule.next_fire_at = None
            continue
        rows += planned
    ScheduleRun.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    update_rows(Schedule, ["next_fire_at"], [(s.pk, s.next_fire_at) for s in due])
    mine = list(ScheduleRun.objects.filter(claim_token=token).only("id", "status"))
    missed = sum(1 for run in mine if run.status == ScheduleRun.Status.MISSED)
    return mine, missed


def start_due_runs(
    now: datetime, *, batch: int = BATCH, chunk: int = START_CHUNK
) -> tuple[int, int]:
    """Start the due runs whose chat is free, oldest slot first, `chunk` at a time (one
    transaction and a constant number of queries each: `schedule_runs_start`); returns
    (started, still waiting). A chunk that cannot be written is retried one run at a time,
    and a run that still cannot start is failed, so it never blocks the others."""
    open_turns = Turn.objects.filter(chat_id=OuterRef("schedule__chat_id"), status__in=OPEN_TURN)
    due = ScheduleRun.objects.filter(status=ScheduleRun.Status.DUE, slot_at__lte=now)
    run_ids = list(
        due.filter(~Exists(open_turns))
        .order_by("slot_at", "id")
        .values_list("id", flat=True)[:batch]
    )
    started = 0
    for start in range(0, len(run_ids), chunk):
        ids = run_ids[start : start + chunk]
        try:
            outcomes = schedule_runs_start(run_ids=ids, now=now)
        except Exception:  # noqa: BLE001 - e.g. one prompt refused: start them one by one
            logger.exception("a batch of %s schedule runs could not start; one by one", len(ids))
            outcomes = {}
            for run_id in ids:
                try:
                    outcomes[run_id] = schedule_run_start(run_id=run_id, now=now)
                except Exception as exc:  # noqa: BLE001 - one broken run must not block others
                    logger.exception("schedule run %s could not start", run_id)
                    schedule_run_fail(run_id=run_id, error=f"could not start: {exc}")
        started += sum(1 for outcome in outcomes.values() if outcome.started)
    return started, due.filter(status=ScheduleRun.Status.DUE).count()


def settle_unannounced(*, batch: int = BATCH) -> int:
    """Settle running runs whose turn finished without telling us (a turn the sweep marked
    interrupted after its worker died sends no turn_finished)."""
    finished = Turn.objects.filter(pk=OuterRef("turn_id"), status__in=Turn.FINISHED)
    stale = ScheduleRun.objects.filter(status=ScheduleRun.Status.RUNNING).filter(
        Exists(finished) | ~Exists(Turn.objects.filter(pk=OuterRef("turn_id")))
    )
    settled = 0
    for run_id in list(stale.values_list("id", flat=True)[:batch]):
        if schedule_run_settle(run_id=run_id):
            settled += 1
    return settled


def pause_where_owner_lost_access(now: datetime) -> int:
    """Pause the enabled schedules whose owner may no longer post in the target chat by the
    hub's own rule (removed, deactivated, not the owner of a `/v1` conversation): one query
    per pass when there are none, so it happens within seconds, not at the next slot; each
    owner is told why. (A Telegram group's answer is asked when a run starts.) Returns how
    many were paused."""
    poster = chat_posters().filter(chat_id=OuterRef("chat_id"), person_id=OuterRef("owner_id"))
    lost = list(
        Schedule.objects.filter(enabled=True)
        .filter(~Exists(poster))
        .select_related("owner", "chat")
    )
    paused = 0
    for schedule in lost:
        problem = owner_post_refusal(schedule.owner, schedule.chat) or OWNER_LOST_ACCESS
        if schedule_pause_owner_may_not_post(schedule=schedule, problem=problem, now=now):
            paused += 1
    if paused:
        logger.warning("paused %s schedule(s) whose owner may no longer post in the chat", paused)
    return paused


def dispatch(now: datetime | None = None) -> DispatchResult:
    """One dispatcher pass (beat runs it every SCHEDULES_DISPATCH_SECONDS): heartbeat,
    claim due slots, settle runs whose turn ended unannounced, start runs whose chat is
    free. Safe to run in several processes at once."""
    now = now or timezone.now()
    result = DispatchResult()
    heartbeat_write(now)
    result.paused = pause_where_owner_lost_access(now)
    mine, result.missed = claim_due_slots(now)
    result.claimed = len(mine)
    result.settled = settle_unannounced()
    result.started, result.waiting = start_due_runs(now)
    return result
