"""A schedule's runs: starting due runs in their chats (as turns of the schedule's actor,
posted in the owner's name, checked again for the owner's right to post) and recording each
run's outcome: settled, failed, delivered or not, with the owner told when a schedule is
paused. The dispatcher (`schedules.dispatch`) claims slots and calls `schedule_run_start`.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from chats.agent import events
from chats.agent.turns import turns_request_quiet
from chats.deliveries import DeliveryUnavailable, person_tell, reply_deliver
from chats.models import Actor, Channel, Message, Turn
from chats.payloads import message_payload
from chats.posting import PostVerdict, post_check_channels
from chats.rows import insert_rows
from chats.selectors import (
    chat_may_post,
    chat_posters,
)
from chats.services import message_token_count, validate_text
from schedules.models import Schedule, ScheduleRun
from schedules.rows import update_rows
from schedules.services.rights import (
    OWNER_LOST_ACCESS,
    OWNER_MAY_NOT_POST,
    owner_post_refusal,
)

logger = logging.getLogger(__name__)

ACTOR_NAMESPACE = "schedule"
# The key of a run's prompt metadata naming who pays for the run (usage.services reads it).
PAYER_KEY = "payer"
OPEN_TURN = (Turn.Status.QUEUED, Turn.Status.RUNNING, Turn.Status.WAITING)
# Reasons of an interruption a person caused (a newer message, the Stop button): the run is
# skipped, not failed, and does not count towards pausing the schedule.
PERSON_INTERRUPTS = ("superseded", "stopped by")
# The claim token of a run someone asked for outside the slots.
RUN_NOW = "now"


@dataclass(frozen=True)
class StartResult:
    started: bool
    why: str = ""  # "busy", "not due", "skipped: ..."


def schedule_actor_name(schedule: Schedule) -> str:
    return f"scheduled by {schedule.owner.get_username()}"


def schedule_run_start(*, run_id: int, now: datetime | None = None) -> StartResult:
    """Start one due run (`schedule_runs_start` for one id): run now, and the next run of a
    chat whose turn just finished."""
    return schedule_runs_start(run_ids=[run_id], now=now)[run_id]


def schedule_runs_start(
    *, run_ids: list[int], now: datetime | None = None
) -> dict[int, StartResult]:
    """Start the due runs `run_ids` whose chat has no open turn (queued, running or
    waiting), in one transaction and a constant number of queries however many there are:
    store each prompt in its chat, authored by the schedule's own actor, and request turns
    that never interrupt anyone. A busy chat leaves its run `due` (started when the chat is
    free; at most one run per chat starts in a batch); an owner who can no longer read the
    chat pauses the schedule and skips the run; a run of a paused schedule is skipped.
    Returns each id's outcome ("not due" for runs no longer due, or taken by another
    starter at this moment). Raises if the batch cannot be written: the caller starts its
    runs one by one then, so one run that cannot start never blocks the others."""
    outcomes = {run_id: StartResult(False, "not due") for run_id in run_ids}
    if not run_ids:
        return outcomes
    # Asked before any lock is taken: a channel's answer may take a network round trip.
    channel_refusals = _channel_refusals(run_ids)
    # The hub's own part of `chat_may_post` for every run at once.
    readable = chat_posters().filter(
        chat_id=OuterRef("schedule__chat_id"), person_id=OuterRef("schedule__owner_id")
    )
    with transaction.atomic():
        # One query: the runs, their schedules, owners and chats, and whether each owner may
        # still read the chat. It locks the runs (a second starter then finds them no longer
        # due) and their chats (two schedules of one chat cannot both find it free) on
        # PostgreSQL, in chat order so two starters cannot deadlock, skipping rows another
        # starter holds (they are its to start); SQLite transactions take the write lock at
        # BEGIN (transaction_mode IMMEDIATE), which serialises starters the same way.
        runs = list(
            ScheduleRun.objects.select_for_update(of=("self", "schedule__chat"), skip_locked=True)
            .select_related("schedule__owner", "schedule__chat")
            .annotate(readable=Exists(readable))
            .filter(pk__in=run_ids, status=ScheduleRun.Status.DUE)
            .order_by("schedule__chat_id", "slot_at", "id")
        )
        # Whether a turn is open in each chat, asked only now that its row is locked: the
        # locking statement's own snapshot may predate a starter that held the chat, started
        # a turn there and committed while this one waited for nothing (skip_locked), and
        # then both found the chat free (two running turns in one chat, seen in CI).
        busy_chats = set(
            Turn.objects.filter(
                chat_id__in={run.schedule.chat_id for run in runs}, status__in=OPEN_TURN
            ).values_list("chat_id", flat=True)
        )
        now = now or timezone.now()
        lost, paused, free, chats = [], [], [], set()
        for run in runs:
            schedule = run.schedule
            refusal = channel_refusals.get(run.pk)
            if not run.readable:
                lost.append((run, owner_post_refusal(schedule.owner, schedule.chat)))
                outcomes[run.pk] = StartResult(False, "skipped: owner lost access")
            elif refusal is not None and refusal.unsure:
                # No judgement on the owner: this run fails (counted, the owner told).
                error = f"not run: {refusal.reason}"
                _finish(run, ScheduleRun.Status.FAILED, now, error=error)
                _failed(run, error, now)
                outcomes[run.pk] = StartResult(False, f"failed: {refusal.reason}")
            elif refusal is not None:
                lost.append((run, OWNER_MAY_NOT_POST + refusal.reason))
                outcomes[run.pk] = StartResult(False, "skipped: owner may not post")
            elif not schedule.enabled and run.claim_token != RUN_NOW:
                paused.append(run)
                outcomes[run.pk] = StartResult(False, "skipped: paused")
            elif schedule.chat_id in busy_chats or schedule.chat_id in chats:
                outcomes[run.pk] = StartResult(False, "busy")
            else:
                chats.add(schedule.chat_id)
                free.append(run)
        for run, problem in lost:
            schedule_pause_owner_may_not_post(
                schedule=run.schedule, problem=problem or OWNER_LOST_ACCESS, now=now, run=run
            )
        if paused:
            ScheduleRun.objects.filter(pk__in=[run.pk for run in paused]).update(
                status=ScheduleRun.Status.SKIPPED, finished_at=now, reason="the schedule is paused"
            )
        if free:
            messages = _store_prompts(free, now)
            # Registered before the turns' tasks: viewers see each prompt before its reply.
            transaction.on_commit(lambda: _announce(messages))
            turns = turns_request_quiet(messages=messages)
            started = []
            for run, message, turn in zip(free, messages, turns, strict=True):
                lateness = max(0.0, (now - run.slot_at).total_seconds())
                started.append((run.pk, message.pk, turn.pk, lateness))
                outcomes[run.pk] = StartResult(True)
            update_rows(
                ScheduleRun,
                ["trigger", "turn", "lateness_seconds"],
                started,
                same={"status": ScheduleRun.Status.RUNNING, "started_at": now},
            )
    return outcomes


def _channel_refusals(run_ids: list[int]) -> dict[int, PostVerdict]:
    """What the channels say now about the owners of those due runs whose chat lives on
    another platform (a Telegram group: left? banned?), once per owner and chat: the
    refusals, by run id. One query when no such chat is among them."""
    channels = post_check_channels()
    if not channels:
        return {}
    runs = (
        ScheduleRun.objects.filter(
            pk__in=run_ids, status=ScheduleRun.Status.DUE, schedule__chat__channel__in=channels
        )
        .select_related("schedule__owner", "schedule__chat")
        .only("id", "schedule__owner", "schedule__chat")
    )
    asked: dict[tuple[int, int], PostVerdict] = {}
    refusals = {}
    for run in runs:
        owner, chat = run.schedule.owner, run.schedule.chat
        key = (owner.pk, chat.pk)
        if key not in asked:
            asked[key] = chat_may_post(owner, chat)
        if not asked[key]:
            refusals[run.pk] = asked[key]
    return refusals


def schedule_pause_owner_may_not_post(
    *, schedule: Schedule, problem: str, now: datetime, run: ScheduleRun | None = None
) -> bool:
    """The owner may no longer post in the schedule's chat (`problem` says why): pause it
    saying why and tell its owner, as a failure is told; with `run`, that run is skipped
    and nothing is posted. False (and nobody told, unless the run was asked for now) when
    it was paused already."""
    paused = Schedule.objects.filter(pk=schedule.pk, enabled=True).update(
        enabled=False, paused_reason=problem[:255], paused_at=now
    )
    if run is not None:
        _finish(run, ScheduleRun.Status.SKIPPED, now, reason=f"schedule paused: {problem}"[:255])
    if paused or (run is not None and run.claim_token == RUN_NOW):
        what = f"did not run ({_slot(run)})" if run is not None else "is paused"
        _tell_owner(schedule, f"{what}: {problem}. Resume it once its owner may post there.")
    return bool(paused)


def _store_prompts(runs: list[ScheduleRun], now: datetime) -> list[Message]:
    """The prompt of each run as a `user` message in its chat, authored by its schedule's
    actor, as `message_ingest` stores one (the rows it writes; a database trigger bumps each
    chat's activity), in three to four queries for the whole batch. Each message commits
    together with its run's move to `running`, so it is stored once; the random part of its
    external id keeps an id SQLite reuses after a delete from matching an old run's."""
    actors = _schedule_actors([run.schedule for run in runs])
    messages = []
    for run in runs:
        schedule, chat = run.schedule, run.schedule.chat
        text = validate_text(schedule.prompt)  # checked at creation; IngestError fails the batch
        messages.append(
            Message(
                chat=chat,
                actor=actors[(chat.channel, str(schedule.pk))],
                role=Message.Role.USER,
                text=text,
                external_id=f"schedule-run-{run.pk}-{uuid.uuid4().hex[:12]}",
                created_at=now,
                token_count=message_token_count(text, []),
                # `mode`: an isolated run stays isolated if its schedule is deleted before
                # its turn runs (schedules.history). PAYER_KEY: who pays, fixed now, read by
                # the budget check and usage whatever happens to the schedule afterwards.
                metadata={
                    "schedule": schedule.pk,
                    "schedule_run": run.pk,
                    "mode": schedule.mode,
                    PAYER_KEY: schedule.owner_id,
                },
            )
        )
    return insert_rows(messages)  # as message_ingest: insert_row, no save(), no signals


def _schedule_actors(schedules: list[Schedule]) -> dict[tuple[str, str], Actor]:
    """The Actor of each schedule ("scheduled by <owner>", namespace `schedule`, external id
    the schedule's id, linked to no Person, so the owner's membership is never re-created
    through it), created if missing and renamed if the owner was: (channel, id) → Actor."""
    wanted = {
        (schedule.chat.channel, str(schedule.pk)): schedule_actor_name(schedule)[:255]
        for schedule in schedules
    }
    Actor.objects.bulk_create(
        [
            Actor(channel=channel, namespace=ACTOR_NAMESPACE, external_id=key, display_name=name)
            for (channel, key), name in wanted.items()
        ],
        ignore_conflicts=True,
    )
    actors = {
        (actor.channel, actor.external_id): actor
        for actor in Actor.objects.filter(
            namespace=ACTOR_NAMESPACE,
            channel__in={channel for channel, _ in wanted},
            external_id__in={key for _, key in wanted},
        )
        if (actor.channel, actor.external_id) in wanted
    }
    renamed = []
    for key, actor in actors.items():
        if actor.display_name != wanted[key]:
            actor.display_name, actor.updated_at = wanted[key], timezone.now()
            renamed.append(actor)
    if renamed:
        Actor.objects.bulk_update(renamed, ["display_name", "updated_at"])
    return actors


def _announce(messages: list[Message]) -> None:
    """Show the stored prompts to their chats' viewers (after commit, as message_received)."""
    events.publish_many(
        [(m.chat_id, "message.created", {"message": message_payload(m)}) for m in messages]
    )


def _finish(run: ScheduleRun, status: str, now: datetime, **fields) -> None:
    ScheduleRun.objects.filter(pk=run.pk).update(status=status, finished_at=now, **fields)


def schedule_run_settle(*, run_id: int, turn: Turn | None = None) -> str | None:
    """Record the outcome of a running run from its finished turn: `delivered` (reply stored
    in a web, API or terminal chat), `awaiting_delivery` (reply stored for Telegram, whose
    delivery is not confirmed yet), `failed` (with the turn's error; counts towards pausing
    the schedule) or `skipped` (a person's message or Stop interrupted it, or a turn gate
    such as a used-up budget ended it before the model was called). Returns the new
    status, or None if the run was not running or its turn not finished."""
    now = timezone.now()
    with transaction.atomic():
        run = (
            ScheduleRun.objects.select_for_update()
            .select_related("schedule__chat")
            .filter(pk=run_id, status=ScheduleRun.Status.RUNNING)
            .first()
        )
        if run is None:
            return None
        turn = Turn.objects.filter(pk=run.turn_id).first() if run.turn_id else None
        if turn is None:
            status, fields = ScheduleRun.Status.FAILED, {"error": "its turn is gone"}
        elif not turn.is_finished:
            return None
        else:
            status, fields = _outcome(run, turn)
        _finish(run, status, now, **fields)
        if status == ScheduleRun.Status.FAILED:
            _failed(run, fields["error"], now)
        elif status == ScheduleRun.Status.DELIVERED:
            Schedule.objects.filter(pk=run.schedule_id).update(consecutive_failures=0)
    return status


def schedule_run_fail(*, run_id: int, error: str) -> bool:
    """Record that a due run could not start (e.g. its chat's message was refused), counting
    towards pausing the schedule; False if it was no longer due."""
    now = timezone.now()
    with transaction.atomic():
        run = (
            ScheduleRun.objects.select_for_update()
            .select_related("schedule__chat")
            .filter(pk=run_id, status=ScheduleRun.Status.DUE)
            .first()
        )
        if run is None:
            return False
        _finish(run, ScheduleRun.Status.FAILED, now, error=error[:2000])
        _failed(run, error, now)
    return True


def schedule_run_delivered(*, run_id: int, receipt: dict) -> bool:
    """Record the channel's receipt of a run `awaiting_delivery`: `delivered` only when
    every part of the reply has its message id (`receipt["parts"]` ids, none missing);
    otherwise it stays awaiting. False if nothing changed."""
    ids = receipt.get("telegram_message_ids") or []
    parts = receipt.get("parts") or 0
    complete = (
        parts >= 1
        and len(ids) == parts
        and all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids)
    )
    if not complete:
        logger.warning("run receipt without every part's message id: %r", receipt)
        return False
    now = timezone.now()
    with transaction.atomic():
        run = _awaiting(run_id)
        if run is None:
            return False
        confirmed = {**_stored_receipt(run), **receipt, "stored": True, "delivered": True}
        _finish(run, ScheduleRun.Status.DELIVERED, now, delivered_to=[confirmed])
        Schedule.objects.filter(pk=run.schedule_id).update(consecutive_failures=0)
    return True


def schedule_run_delivery_failed(*, run_id: int, error: str, receipt: dict | None = None) -> bool:
    """Record that the channel gave up on the reply of a run `awaiting_delivery` (the bot
    blocked or removed from the group, the topic or chat gone): `failed` with its reason,
    counting towards pausing the schedule, and the owner is told. False if it was not
    awaiting delivery."""
    now = timezone.now()
    with transaction.atomic():
        run = _awaiting(run_id)
        if run is None:
            return False
        failed = {
            **_stored_receipt(run),
            **(receipt or {}),
            "delivered": False,
            "error": error[:500],
        }
        message = f"the reply is stored but was not delivered: {error}"[:2000]
        _finish(run, ScheduleRun.Status.FAILED, now, error=message, delivered_to=[failed])
        _failed(run, message, now)
    return True


def _stored_receipt(run: ScheduleRun) -> dict:
    """The receipt stored when the reply was handed over, without its "waiting" note."""
    stored = run.delivered_to[0] if run.delivered_to else {}
    return {key: value for key, value in stored.items() if key != "note"}


def _awaiting(run_id: int) -> ScheduleRun | None:
    return (
        ScheduleRun.objects.select_for_update(of=("self",))
        .select_related("schedule__chat", "schedule__owner")
        .filter(pk=run_id, status=ScheduleRun.Status.AWAITING_DELIVERY)
        .first()
    )


def _outcome(run: ScheduleRun, turn: Turn) -> tuple[str, dict]:
    chat = run.schedule.chat
    if turn.status == Turn.Status.COMPLETED:
        if turn.reply_id is None:
            return ScheduleRun.Status.FAILED, {"error": "the turn completed without a reply"}
        reply = Message.objects.filter(pk=turn.reply_id).values("text", "metadata").first()
        if reply and (reply["metadata"] or {}).get("refused"):
            # A turn gate (a budget used up) ended it without calling the model: the run did
            # not happen. Its answer stays stored in the chat; the run says why it skipped,
            # and nothing is sent to Telegram nor counted as a failure.
            return ScheduleRun.Status.SKIPPED, {"reason": f"not run: {reply['text']}"[:255]}
        receipt = {"channel": chat.channel, "chat": chat.chat_key, "message": turn.reply_id}
        if chat.channel == Channel.TELEGRAM:
            # No Telegram update asked for this turn, so no reply is queued for it yet: hand
            # it to the bridge (its outbox row commits with this status); the bridge's
            # receipt (`chats.signals.reply_delivered`) makes the run delivered.
            try:
                receipt |= reply_deliver(turn=turn)
            except DeliveryUnavailable as exc:
                receipt |= {"stored": True, "delivered": False}
                error = f"the reply is stored but cannot be sent: {exc}"
                return ScheduleRun.Status.FAILED, {"error": error, "delivered_to": [receipt]}
            note = "stored in the hub; waiting for Telegram to confirm every part"
            receipt |= {"stored": True, "delivered": False, "note": note}
            return ScheduleRun.Status.AWAITING_DELIVERY, {"delivered_to": [receipt]}
        receipt |= {"stored": True, "delivered": True}
        return ScheduleRun.Status.DELIVERED, {"delivered_to": [receipt]}
    if turn.status == Turn.Status.FAILED:
        return ScheduleRun.Status.FAILED, {"error": turn.error or "the turn failed"}
    reason = turn.interrupt_reason or "interrupted"
    if reason.startswith(PERSON_INTERRUPTS):
        return ScheduleRun.Status.SKIPPED, {"reason": f"interrupted: {reason}"[:255]}
    return ScheduleRun.Status.FAILED, {"error": f"interrupted: {reason}"}


def _failed(run: ScheduleRun, error: str, now: datetime) -> None:
    """A run failed: count it (perhaps pausing the schedule) and tell the schedule's owner,
    in their own private chat with the bot when they have one (not the chat that refused the
    reply), else on their dashboard. Telling never undoes the run's record."""
    schedule = run.schedule
    paused = _count_failure(schedule, now)
    text = f"failed ({_slot(run)}): {error}"
    if paused:
        limit = settings.SCHEDULES_PAUSE_AFTER_FAILURES
        text += (
            f" It is paused now, after {limit} failed runs in a row; resume it once the cause "
            "is fixed."
        )
    _tell_owner(schedule, text)


def _slot(run: ScheduleRun) -> str:
    return f"run of {run.slot_at:%Y-%m-%d %H:%M} UTC"


def _tell_owner(schedule: Schedule, what: str) -> None:
    """Tell the schedule's owner "Your schedule #N in <chat> <what>" in their own private
    chat with the bot when they have one (not the chat of the schedule), else on their
    dashboard. Telling never undoes the run's record."""
    chat = schedule.chat
    label = f"“{chat.title}”" if chat.title else chat.chat_key
    text = f"Your schedule #{schedule.pk} in {label} {what}"
    try:
        with transaction.atomic():
            person_tell(person=schedule.owner, text=text, kind="schedule_failed", not_in=chat)
    except Exception:  # noqa: BLE001 - the run's record and paused_reason still say it
        logger.exception("could not tell the owner of schedule %s", schedule.pk)


def _count_failure(schedule: Schedule, now: datetime) -> bool:
    """One more failure in a row; at SCHEDULES_PAUSE_AFTER_FAILURES the schedule pauses
    (True when this failure paused it)."""
    limit = settings.SCHEDULES_PAUSE_AFTER_FAILURES
    failures = F("consecutive_failures") + 1
    Schedule.objects.filter(pk=schedule.pk).update(consecutive_failures=failures)
    paused = Schedule.objects.filter(
        pk=schedule.pk, enabled=True, consecutive_failures__gte=limit
    ).update(
        enabled=False,
        paused_at=now,
        paused_reason=f"paused after {limit} failed runs in a row",
    )
    if paused:
        logger.warning("schedule %s paused after %s failed runs in a row", schedule.pk, limit)
    return bool(paused)
