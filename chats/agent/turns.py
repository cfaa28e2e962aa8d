"""Turn lifecycle services: request, claim, renew, wait, resume, finish, recover, sweep.

`queued → running → completed | failed | interrupted`, and `running → waiting → queued`
when a tool call needs a person's decision (see "Waiting" below). Status changes happen here, under
row locks or as conditional updates; the partial unique index `turn_one_running_per_chat`
makes a second running turn in one chat impossible even across workers.

The lease: a running turn belongs to its worker only while its row says `running`. The
worker renews `lease_expires_at` from a heartbeat thread (`chats.agent.lease`); whoever finds
the lease run out (a claim in the same chat, the periodic sweep, a restarted worker) marks
the turn interrupted and raises its interrupt flag. Every later write of the old worker
(`turn_append`, `turn_finish`) is a conditional update on `status = running` in the same
transaction as the message it stores, so a turn that lost its lease stores nothing more: its
unsent reply is discarded (the recovery already announced `turn.interrupted`), and what it
stored while it held the lease (tool steps) stays.

Waiting: a tool's gate (`Tool.gate`) may say that a call needs a decision first. The loop
has stored the assistant's tool-call step (and the results of the calls before it); it
moves the turn to `waiting` (`turn_wait`), which holds no worker, no lease and no tool
timeout, and its worker goes on to other work. A decision moves it back to `queued`
(`turn_resume`) and enqueues it; it is claimed as any queued turn and continues from its
stored steps. Nothing is lost or run twice across a restart: the steps are stored, a queued
turn whose task is gone is enqueued again by the sweep, and a claim runs it at most once.
While a turn waits, a new message in the chat: in `interrupt` mode ends the waiting turn
(interrupted, superseded: its open decision is void); in `queue` mode waits behind it.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from chats.agent import events
from chats.agent.interrupts import (
    clear_interrupt,
    clear_interrupts,
    interrupt_reason,
    request_interrupt,
)
from chats.agent.registry import registry
from chats.agent.runner import turn_runner
from chats.models import BusyMode, Chat, Message, Turn
from chats.payloads import message_payload
from chats.rows import insert_row, insert_rows
from chats.services import IngestResult, message_append
from chats.signals import model_usage, turn_finished
from hermes_site.redis import guarded

logger = logging.getLogger(__name__)

SUPERSEDED = "superseded by a newer message"
SUPERSEDED_WHILE_WAITING = "superseded by a newer message while waiting for a decision"
LEASE_EXPIRED = "the worker running it stopped (lease expired)"
WORKER_RESTARTED = "the worker running it restarted"
LEASE_LOST = "its lease was lost (marked interrupted by another process)"
# At most this many lost turns are enqueued again per sweep; the next sweep takes the rest.
REQUEUE_BATCH = 500


class LeaseLost(Exception):
    """The turn is no longer running (recovered as stale): its worker must store nothing."""


def turn_request(*, message: Message, enqueue: bool = True, interrupt: bool = True) -> Turn:
    """Queue a turn answering `message` and (unless `enqueue` is off: the in-process CLI)
    hand it to the turn runner (`chats.agent.runner`: Celery) after commit.

    In `interrupt` busy mode, running turns of the chat are asked to stop; in `queue` mode
    they finish first. With `interrupt` off (a trigger no person sent, e.g. a scheduled
    run) the request never stops a running turn nor ends a waiting one, whatever the mode:
    the new turn waits until the chat is free."""
    chat = message.chat
    # No savepoint when nested (an adapter's transaction): nothing here is retried on error,
    # the caller's transaction fails as a whole, and the savepoint cost two queries a turn.
    with transaction.atomic(savepoint=False):
        turn = insert_row(Turn(chat=chat, trigger=message))  # no save() override, no signals
        # Read the mode fresh (the chat row the adapter holds may come from a cache) with the
        # running turn, at most one per chat (turn_one_running_per_chat), in one query.
        busy_mode, running_id, waiting_id = _busy_mode_and_running(chat.pk)
        running = [running_id] if running_id is not None else []
        if interrupt and busy_mode == BusyMode.INTERRUPT and waiting_id is not None:
            _end_waiting(chat.pk, SUPERSEDED_WHILE_WAITING)
    clear_interrupt(turn.pk)  # ids can come back on SQLite: never inherit an old flag
    if interrupt and busy_mode == BusyMode.INTERRUPT:
        for turn_id in running:
            request_interrupt(turn_id, SUPERSEDED)
    if enqueue:
        transaction.on_commit(lambda: _enqueue(turn.pk))
    return turn


def turns_request_quiet(*, messages: list[Message], enqueue: bool = True) -> list[Turn]:
    """Queue one turn for each of `messages` as `turn_request(message=..., interrupt=False)`
    would, in a constant number of queries whatever their number (one multi-row INSERT),
    and enqueue their tasks after commit. For triggers no person sent (a batch of scheduled
    runs): nothing running or waiting is stopped, in any busy mode; each new turn is claimed
    on the normal path (leases, the sweep) once its chat is free. Returns the turns, in the
    order of `messages`."""
    if not messages:
        return []
    with transaction.atomic(savepoint=False):
        # No save() override, no signals: as insert_row for one turn.
        turns = insert_rows(
            [Turn(chat_id=message.chat_id, trigger=message) for message in messages]
        )
    ids = [turn.pk for turn in turns]
    clear_interrupts(ids)  # ids can come back on SQLite: never inherit an old flag
    if enqueue:
        transaction.on_commit(lambda: _enqueue_many(ids))
    return turns


def _enqueue_many(turn_ids: list[int]) -> None:
    try:
        turn_runner().enqueue_many(turn_ids)
    except Exception:  # noqa: BLE001 - the turns stay queued; the sweep enqueues them again
        logger.error("could not enqueue %s turn(s) (is Redis up?)", len(turn_ids), exc_info=True)


def _busy_mode_and_running(chat_id: int) -> tuple[str, int | None, int | None]:
    """The chat's busy mode, its running turn and a waiting turn, in one query."""
    running = Turn.objects.filter(chat_id=OuterRef("pk"), status=Turn.Status.RUNNING)
    waiting = Turn.objects.filter(chat_id=OuterRef("pk"), status=Turn.Status.WAITING)
    return (
        Chat.objects.filter(pk=chat_id)
        .annotate(
            running_id=Subquery(running.values("id")[:1]),
            waiting_id=Subquery(waiting.values("id")[:1]),
        )
        .values_list("busy_mode", "running_id", "waiting_id")
        .get()
    )


def _end_waiting(chat_id: int, reason: str, *, turn_id: int | None = None) -> list[int]:
    """Mark the chat's waiting turns (or the one `turn_id`) interrupted, after commit
    announce it and tell other apps (whose open decisions for it become void)."""
    waiting = Turn.objects.filter(chat_id=chat_id, status=Turn.Status.WAITING)
    if turn_id is not None:
        waiting = waiting.filter(pk=turn_id)
    ended = []
    for waiting_id in list(waiting.values_list("id", flat=True)):
        updated = Turn.objects.filter(pk=waiting_id, status=Turn.Status.WAITING).update(
            status=Turn.Status.INTERRUPTED,
            interrupt_reason=reason,
            wait_reason="",
            finished_at=timezone.now(),
        )
        if updated:
            ended.append(waiting_id)

    def announce() -> None:
        if ended:
            turn_wake_next(chat_id)
        for ended_id in ended:
            events.publish(chat_id, "turn.interrupted", turn_id=ended_id, reason=reason)
            turn = Turn.objects.filter(pk=ended_id).first()
            if turn is not None:
                turn_announce_finished(turn, Turn.Status.INTERRUPTED)

    if ended:
        transaction.on_commit(announce)
    return ended


def _enqueue(turn_id: int) -> None:
    try:
        turn_runner().enqueue(turn_id)
    except Exception:  # noqa: BLE001 - the turn stays queued and is visible as such
        logger.error("could not enqueue turn %s (is Redis up?)", turn_id, exc_info=True)


def message_received(
    result: IngestResult, *, respond: bool = True, enqueue: bool = True, held: bool = False
) -> Turn | None:
    """After an adapter stored a user message: announce it and, if wanted, request a turn.
    `held`: an app placed a hold on it (`chats.agent.holds`), which requests the turn later."""
    if result.duplicate:
        return None
    message = result.message
    transaction.on_commit(
        lambda: events.publish(message.chat_id, "message.created", message=message_payload(message))
    )
    if respond and not held and message.role == Message.Role.USER:
        return turn_request(message=message, enqueue=enqueue)
    return None


class Claim(Enum):
    CLAIMED = "claimed"
    BUSY = "busy"  # another turn runs (or, in queue mode, an older one is queued): retry later
    # Queue mode, behind a turn waiting for a decision (which may take minutes): do not poll;
    # `turn_wake_next` enqueues it again once that turn goes on or ends.
    PARKED = "parked"
    GONE = "gone"  # finished, superseded or unknown: nothing to do


@dataclass(frozen=True)
class ClaimResult:
    outcome: Claim
    turn: Turn | None = None


def _lease_deadline():
    return timezone.now() + timedelta(seconds=settings.TURN_LEASE_SECONDS)


def turns_recover_stale(*, chat_id: int | None = None, worker: str | None = None) -> int:
    """Mark running turns whose lease ran out (or, with `worker`, that this restarted worker
    was running) as interrupted and raise their interrupt flags, so a worker that is still
    alive stops. They are never run again. Returns how many."""
    now = timezone.now()
    due = Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True)
    if worker:
        due |= Q(worker=worker)
    # Unordered: ordering by id would make SQLite scan the table instead of the small
    # partial index of running turns (turn_running_lease_idx).
    stale = Turn.objects.filter(due, status=Turn.Status.RUNNING).order_by()
    if chat_id is not None:
        stale = stale.filter(chat_id=chat_id)
    recovered = 0
    for turn_id, turn_chat_id, lease, turn_worker in stale.values_list(
        "id", "chat_id", "lease_expires_at", "worker"
    ):
        reason = LEASE_EXPIRED if lease is None or lease < now else WORKER_RESTARTED
        # Re-checked in the update: a heartbeat that renewed meanwhile keeps its turn.
        still_due = Q(worker=turn_worker) if reason == WORKER_RESTARTED else due
        if _mark_interrupted(turn_id, turn_chat_id, reason, still_due):
            recovered += 1
    return recovered


def turn_finish_stale(*, turn_id: int, reason: str) -> bool:
    """Mark a running turn interrupted (its worker is gone or stalled) and raise its
    interrupt flag; False if it was no longer running."""
    chat_id = Turn.objects.filter(pk=turn_id).values_list("chat_id", flat=True).first()
    return chat_id is not None and _mark_interrupted(turn_id, chat_id, reason, Q())


def _mark_interrupted(turn_id: int, chat_id: int, reason: str, condition: Q) -> bool:
    updated = Turn.objects.filter(condition, pk=turn_id, status=Turn.Status.RUNNING).update(
        status=Turn.Status.INTERRUPTED,
        interrupt_reason=reason,
        finished_at=timezone.now(),
        lease_expires_at=None,
    )
    if not updated:
        return False
    # The worker may still be alive (stalled, partitioned): tell it to stop. Its own writes
    # are refused anyway (they require `running`); the flag only saves its wasted work.
    request_interrupt(turn_id, reason)
    logger.warning("turn %s marked interrupted: %s", turn_id, reason)
    events.publish(chat_id, "turn.interrupted", turn_id=turn_id, reason=reason)
    return True


def turn_claim(*, turn_id: int, worker: str) -> ClaimResult:
    """Move a queued turn to running if the chat allows it now."""
    turn = Turn.objects.select_related("chat").filter(pk=turn_id).first()
    if turn is None or turn.status != Turn.Status.QUEUED:
        return ClaimResult(Claim.GONE, turn)
    turns_recover_stale(chat_id=turn.chat_id)
    try:
        with transaction.atomic():
            turn = Turn.objects.select_for_update().select_related("chat").get(pk=turn_id)
            if turn.status != Turn.Status.QUEUED:
                return ClaimResult(Claim.GONE, turn)
            waiting = Turn.objects.filter(chat_id=turn.chat_id, status=Turn.Status.QUEUED)
            ahead = Turn.objects.filter(
                chat_id=turn.chat_id,
                status__in=(Turn.Status.QUEUED, Turn.Status.WAITING),
                id__lt=turn.pk,
            )
            if (
                turn.chat.busy_mode == BusyMode.INTERRUPT
                and waiting.filter(id__gt=turn.pk).exists()
            ):
                # A newer message arrived before this turn started: it answers both.
                turn.status = Turn.Status.INTERRUPTED
                turn.interrupt_reason = SUPERSEDED
                turn.finished_at = timezone.now()
                turn.save(update_fields=["status", "interrupt_reason", "finished_at"])
                superseded = True
            elif turn.chat.busy_mode == BusyMode.QUEUE and ahead.exists():
                # An older turn goes first, also one waiting for a decision.
                if ahead.filter(status=Turn.Status.QUEUED).exists():
                    return ClaimResult(Claim.BUSY, turn)
                return ClaimResult(Claim.PARKED, turn)
            else:
                superseded = False
                if turn.chat.busy_mode == BusyMode.INTERRUPT:
                    # A turn that went waiting while this message arrived is superseded too.
                    older = Turn.objects.filter(
                        chat_id=turn.chat_id, status=Turn.Status.WAITING, id__lt=turn.pk
                    )
                    for older_id in list(older.values_list("id", flat=True)):
                        _end_waiting(turn.chat_id, SUPERSEDED_WHILE_WAITING, turn_id=older_id)
                now = timezone.now()
                turn.status = Turn.Status.RUNNING
                turn.started_at = now
                turn.worker = worker
                turn.lease_expires_at = _lease_deadline()
                turn.save(update_fields=["status", "started_at", "worker", "lease_expires_at"])
    except IntegrityError:
        return ClaimResult(Claim.BUSY, turn)
    if superseded:
        events.publish(turn.chat_id, "turn.interrupted", turn_id=turn.pk, reason=SUPERSEDED)
        return ClaimResult(Claim.GONE, turn)
    return ClaimResult(Claim.CLAIMED, turn)


def turn_renew_lease(*, turn_id: int) -> bool:
    """Extend the lease of a running turn; False when it no longer runs (lease lost)."""
    return bool(
        Turn.objects.filter(pk=turn_id, status=Turn.Status.RUNNING).update(
            lease_expires_at=_lease_deadline()
        )
    )


def turn_wait(*, turn: Turn, reason: str, hold: Callable[[], object] | None = None) -> bool:
    """Move a running turn to `waiting`: its worker lets go (no lease, no worker) and it
    keeps its counters for when it continues. `hold` runs in the same transaction (e.g. to
    store the decision the turn waits for), so nobody can decide before the turn waits.
    False, storing nothing, if the turn no longer runs (lease lost)."""
    with transaction.atomic():
        stored = _stored_counters(turn.pk)
        updated = Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING).update(
            status=Turn.Status.WAITING,
            wait_reason=reason[:255],
            worker="",
            lease_expires_at=None,
            model=turn.model,
            provider=turn.provider,
            prompt_tokens=turn.prompt_tokens,
            completion_tokens=turn.completion_tokens,
            iterations=turn.iterations,
            first_delta_ms=turn.first_delta_ms,
            prompt_report=turn.prompt_report,
        )
        if not updated:
            return False
        _send_usage(turn, stored)
        if hold is not None:
            hold()
    turn.status, turn.wait_reason = Turn.Status.WAITING, reason[:255]
    turn.worker, turn.lease_expires_at = "", None
    # A Stop or a newer message that came while it was going to wait: end it now.
    stopped = interrupt_reason(turn.pk)
    if stopped is not None:
        with transaction.atomic():
            if _end_waiting(turn.chat_id, stopped, turn_id=turn.pk):
                turn.status, turn.interrupt_reason = Turn.Status.INTERRUPTED, stopped
        clear_interrupt(turn.pk)
    return True


def turn_resume(*, turn_id: int, enqueue: bool = True) -> bool:
    """A waiting turn got its decision: queue it again (enqueued after commit unless
    `enqueue` is off: the in-process terminal runs it itself). False if it no longer waits
    (stopped, superseded, or already resumed)."""
    updated = Turn.objects.filter(pk=turn_id, status=Turn.Status.WAITING).update(
        status=Turn.Status.QUEUED, wait_reason=""
    )
    if updated and enqueue:
        transaction.on_commit(lambda: _enqueue(turn_id))
    return bool(updated)


def turn_wake_next(chat_id: int) -> None:
    """Enqueue the chat's oldest queued turn again: one parked behind a turn that waited
    (queue mode) goes on now rather than at the sweep. A turn runs at most once, so an
    extra task is harmless."""
    oldest = (
        Turn.objects.filter(chat_id=chat_id, status=Turn.Status.QUEUED)
        .order_by("id")
        .values_list("id", flat=True)
        .first()
    )
    if oldest is not None:
        _enqueue(oldest)


def turn_append(
    *,
    turn: Turn,
    role: str,
    text: str,
    parts: list | None = None,
    metadata: dict | None = None,
    reply_to: Message | None = None,
) -> Message:
    """Store a step of a running turn (a tool call, a tool result) while it holds its lease,
    renewing it; raises LeaseLost, storing nothing, when the turn no longer runs."""
    with transaction.atomic():
        # The conditional update takes the row lock first: a recovery either ran before
        # (nothing stored) or waits until this step is committed.
        if not turn_renew_lease(turn_id=turn.pk):
            raise LeaseLost(turn.pk)
        return message_append(
            chat=turn.chat, role=role, text=text, parts=parts, metadata=metadata, reply_to=reply_to
        )


def turn_finish(
    *,
    turn: Turn,
    status: str,
    reply_text: str | None = None,
    reply_flags: dict | None = None,
    reply_to: Message | None = None,
    error: str = "",
    interrupt_reason: str = "",
) -> bool:
    """Record the outcome of a running turn and append its reply (`reply_text`, unless None)
    in one transaction. False, storing nothing, if it was no longer running (its lease was
    lost and it was recovered): the reply is discarded."""
    now = timezone.now()
    latency_ms = int((now - turn.started_at).total_seconds() * 1000) if turn.started_at else None
    fields = {
        "status": status,
        "error": error,
        "interrupt_reason": interrupt_reason,
        "finished_at": now,
        "latency_ms": latency_ms,
        "lease_expires_at": None,
        "model": turn.model,
        "provider": turn.provider,
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "iterations": turn.iterations,
        "first_delta_ms": turn.first_delta_ms,
        "prompt_report": turn.prompt_report,
    }
    reply = None
    with transaction.atomic():
        stored = _stored_counters(turn.pk)
        if not Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING).update(**fields):
            return False
        _send_usage(turn, stored)
        if reply_text is not None:
            reply = message_append(
                chat=turn.chat,
                role=Message.Role.ASSISTANT,
                text=reply_text,
                metadata={"turn": turn.pk, **(reply_flags or {})},
                reply_to=reply_to,
            )
            Turn.objects.filter(pk=turn.pk).update(reply=reply)
        registry.reply_stored_tell(turn, reply)
    for name, value in fields.items():
        setattr(turn, name, value)
    turn.reply = reply
    clear_interrupt(turn.pk)
    return True


def _stored_counters(turn_id: int) -> tuple[int, int, int]:
    """The token and iteration counters as last stored (read in the storing transaction:
    only the turn's own worker changes them while it runs)."""
    row = (
        Turn.objects.filter(pk=turn_id)
        .values_list("prompt_tokens", "completion_tokens", "iterations")
        .first()
    )
    return row or (0, 0, 0)


def _send_usage(turn: Turn, stored: tuple[int, int, int]) -> None:
    """Announce the model work done since the counters were last stored (see model_usage)."""
    prompt = max(0, turn.prompt_tokens - stored[0])
    completion = max(0, turn.completion_tokens - stored[1])
    calls = max(0, turn.iterations - stored[2])
    if not (prompt or completion or calls):
        return
    for receiver, result in model_usage.send_robust(
        sender=Turn,
        kind="turn",
        chat_id=turn.chat_id,
        turn=turn,
        model=turn.model,
        calls=calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
    ):
        if isinstance(result, Exception):
            logger.error("model_usage receiver %r failed", receiver, exc_info=result)


def turn_announce_finished(turn: Turn, status: str) -> None:
    """Tell other apps (learning's counters) how the turn ended, once its outcome is committed
    and published (so their work never delays what people see); their failure is logged and
    never reaches the turn."""
    for receiver, result in turn_finished.send_robust(sender=Turn, turn=turn, status=status):
        if isinstance(result, Exception):
            logger.error(
                "a turn_finished receiver (%r) failed for turn %s",
                receiver,
                turn.pk,
                exc_info=(type(result), result, result.__traceback__),
            )


def turn_stop(*, turn_id: int, chat: Chat, reason: str) -> bool:
    """Stop a turn of `chat` on a person's request (the Stop button, /stop): a running turn
    stops at its next delta or tool boundary, a queued one never starts, a waiting one ends
    (the decision it waited for is void). False when the turn
    is not in that chat or already finished."""
    with transaction.atomic():
        turn = Turn.objects.select_for_update().filter(pk=turn_id, chat=chat).first()
        if turn is None or turn.is_finished:
            return False
        if turn.status == Turn.Status.WAITING:
            return bool(_end_waiting(chat.pk, reason, turn_id=turn_id))
        if turn.status == Turn.Status.QUEUED:
            turn.status = Turn.Status.INTERRUPTED
            turn.interrupt_reason = reason
            turn.finished_at = timezone.now()
            turn.save(update_fields=["status", "interrupt_reason", "finished_at"])
            transaction.on_commit(
                lambda: events.publish(chat.pk, "turn.interrupted", turn_id=turn_id, reason=reason)
            )
            return True
    request_interrupt(turn_id, reason)
    return True


# --- the periodic sweep -------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    recovered: int
    requeued: int


def turns_sweep(*, enqueue: Callable[[int], object]) -> SweepResult:
    """Recover running turns whose lease ran out, then enqueue again the queued turns whose
    task is gone, in every chat and channel. Two indexed queries when nothing is due."""
    return SweepResult(
        recovered=turns_recover_stale(), requeued=turns_requeue_lost(enqueue=enqueue)
    )


def turns_requeue_lost(*, enqueue: Callable[[int], object]) -> int:
    """Enqueue again turns queued longer than TURN_REQUEUE_AFTER_SECONDS in chats where no
    turn runs: their task was never sent (Redis was down), vanished with Redis's data, or
    gave up waiting. A turn runs at most once (`turn_claim`), so an extra task is harmless;
    each turn is enqueued again at most once per grace period."""
    grace = settings.TURN_REQUEUE_AFTER_SECONDS
    # A turn waiting for a decision holds its chat too (queue mode parks the turns behind it;
    # in interrupt mode a new message ends it): requeueing those would only park them again.
    running = Turn.objects.filter(
        chat_id=OuterRef("chat_id"), status__in=(Turn.Status.RUNNING, Turn.Status.WAITING)
    )
    lost = list(
        Turn.objects.filter(
            status=Turn.Status.QUEUED, created_at__lt=timezone.now() - timedelta(seconds=grace)
        )
        .filter(~Exists(running))  # a turn waiting behind a running one has a polling task
        .order_by("created_at")  # the order of turn_queued_idx: no sort, no table scan
        .values_list("id", flat=True)[:REQUEUE_BATCH]
    )
    requeued = 0
    ttl = max(1, int(grace))
    for turn_id in lost:
        key = f"{settings.REDIS_KEY_PREFIX}:turn-requeued:{turn_id}"
        if not guarded(lambda r, k=key: r.set(k, 1, nx=True, ex=ttl), default=True, what="sweep"):
            continue  # enqueued again recently: give that task its grace period
        try:
            enqueue(turn_id)
        except Exception:  # noqa: BLE001 - the broker is down: the next sweep tries again
            guarded(lambda r, k=key: r.delete(k), default=None, what="sweep")
            logger.warning("could not enqueue lost turn %s; retried later", turn_id, exc_info=True)
            break
        requeued += 1
    if requeued:
        logger.warning("enqueued %s queued turn(s) whose task was gone", requeued)
    return requeued
