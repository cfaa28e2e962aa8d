"""Turn lifecycle services: request, claim, renew, finish, recover.

`queued → running → completed | failed | interrupted`. Status changes happen here, under
row locks; the partial unique index `turn_one_running_per_chat` makes a second running
turn in one chat impossible even across workers.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from chats.agent import events
from chats.agent.interrupts import clear_interrupt, request_interrupt
from chats.models import BusyMode, Chat, Message, Turn
from chats.payloads import message_payload
from chats.rows import insert_row
from chats.services import IngestResult

logger = logging.getLogger(__name__)

SUPERSEDED = "superseded by a newer message"
LEASE_EXPIRED = "the worker running it stopped (lease expired)"
WORKER_RESTARTED = "the worker running it restarted"


def turn_request(*, message: Message, enqueue: bool = True) -> Turn:
    """Queue a turn answering `message` and (unless `enqueue` is off: the in-process CLI)
    enqueue its Celery task after commit.

    In `interrupt` busy mode, running turns of the chat are asked to stop; in `queue` mode
    they finish first."""
    chat = message.chat
    # No savepoint when nested (an adapter's transaction): nothing here is retried on error,
    # the caller's transaction fails as a whole, and the savepoint cost two queries a turn.
    with transaction.atomic(savepoint=False):
        turn = insert_row(Turn(chat=chat, trigger=message))  # no save() override, no signals
        # Read the mode fresh (the chat row the adapter holds may come from a cache) with the
        # running turn, at most one per chat (turn_one_running_per_chat), in one query.
        busy_mode, running_id = _busy_mode_and_running(chat.pk)
        running = [running_id] if running_id is not None else []
    clear_interrupt(turn.pk)  # ids can come back on SQLite: never inherit an old flag
    if busy_mode == BusyMode.INTERRUPT:
        for turn_id in running:
            request_interrupt(turn_id, SUPERSEDED)
    if enqueue:
        transaction.on_commit(lambda: _enqueue(turn.pk))
    return turn


def _busy_mode_and_running(chat_id: int) -> tuple[str, int | None]:
    running = Turn.objects.filter(chat_id=OuterRef("pk"), status=Turn.Status.RUNNING)
    return (
        Chat.objects.filter(pk=chat_id)
        .annotate(running_id=Subquery(running.values("id")[:1]))
        .values_list("busy_mode", "running_id")
        .get()
    )


def _enqueue(turn_id: int) -> None:
    from chats.tasks import run_turn

    try:
        run_turn.delay(turn_id)
    except Exception:  # noqa: BLE001 - the turn stays queued and is visible as such
        logger.error("could not enqueue turn %s (is Redis up?)", turn_id, exc_info=True)


def message_received(
    result: IngestResult, *, respond: bool = True, enqueue: bool = True
) -> Turn | None:
    """After an adapter stored a user message: announce it and, if wanted, request a turn."""
    if result.duplicate:
        return None
    message = result.message
    transaction.on_commit(
        lambda: events.publish(message.chat_id, "message.created", message=message_payload(message))
    )
    if respond and message.role == Message.Role.USER:
        return turn_request(message=message, enqueue=enqueue)
    return None


class Claim(Enum):
    CLAIMED = "claimed"
    BUSY = "busy"  # another turn runs (or, in queue mode, an older one waits): retry later
    GONE = "gone"  # finished, superseded or unknown: nothing to do


@dataclass(frozen=True)
class ClaimResult:
    outcome: Claim
    turn: Turn | None = None


def _lease_deadline():
    return timezone.now() + timedelta(seconds=settings.TURN_LEASE_SECONDS)


def turns_recover_stale(*, chat_id: int | None = None, worker: str | None = None) -> int:
    """Mark running turns whose lease ran out (or, with `worker`, that this restarted worker
    was running) as interrupted. They are never run again. Returns how many."""
    now = timezone.now()
    stale = Turn.objects.filter(status=Turn.Status.RUNNING)
    if chat_id is not None:
        stale = stale.filter(chat_id=chat_id)
    recovered = 0
    for turn in stale:
        reason = None
        if turn.lease_expires_at is None or turn.lease_expires_at < now:
            reason = LEASE_EXPIRED
        elif worker and turn.worker == worker:
            reason = WORKER_RESTARTED
        if reason and turn_finish_stale(turn_id=turn.pk, reason=reason):
            recovered += 1
    return recovered


def turn_finish_stale(*, turn_id: int, reason: str) -> bool:
    with transaction.atomic():
        turn = Turn.objects.select_for_update().filter(pk=turn_id).first()
        if turn is None or turn.status != Turn.Status.RUNNING:
            return False
        turn.status = Turn.Status.INTERRUPTED
        turn.interrupt_reason = reason
        turn.finished_at = timezone.now()
        turn.lease_expires_at = None
        turn.save(update_fields=["status", "interrupt_reason", "finished_at", "lease_expires_at"])
    logger.warning("turn %s marked interrupted: %s", turn_id, reason)
    events.publish(turn.chat_id, "turn.interrupted", turn_id=turn_id, reason=reason)
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
            elif turn.chat.busy_mode == BusyMode.QUEUE and waiting.filter(id__lt=turn.pk).exists():
                return ClaimResult(Claim.BUSY, turn)
            else:
                superseded = False
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


def turn_renew_lease(*, turn: Turn) -> None:
    Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING).update(
        lease_expires_at=_lease_deadline()
    )


def turn_finish(
    *,
    turn: Turn,
    status: str,
    reply: Message | None = None,
    error: str = "",
    interrupt_reason: str = "",
) -> bool:
    """Record the outcome of a running turn; False if it was no longer running (recovered)."""
    now = timezone.now()
    latency_ms = int((now - turn.started_at).total_seconds() * 1000) if turn.started_at else None
    fields = {
        "status": status,
        "reply": reply,
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
    updated = Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING).update(**fields)
    for name, value in fields.items():
        setattr(turn, name, value)
    clear_interrupt(turn.pk)
    return bool(updated)


def turn_stop(*, turn_id: int, chat: Chat, reason: str) -> bool:
    """Stop a turn of `chat` on a person's request (the Stop button, /stop): a running turn
    stops at its next delta or tool boundary, a queued one never starts. False when the turn
    is not in that chat or already finished."""
    with transaction.atomic():
        turn = Turn.objects.select_for_update().filter(pk=turn_id, chat=chat).first()
        if turn is None or turn.is_finished:
            return False
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
