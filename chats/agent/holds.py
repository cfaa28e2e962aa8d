"""Held turns: a message that is not ready for its turn yet (its files are still being
fetched or read, or it is one item of a Telegram album whose other items are still
arriving) gets its turn later, exactly once.

The apps that know why a message must wait place a hold on it, in the transaction that
stores it, before the adapter asks for its turn (`turn_hold_place`); `chats` knows no file
and no album, only reasons, times and a group key:

- `reasons`: what it still waits for ("files"); cleared by whoever waited
  (`turn_hold_clear`);
- `not_before`: a quiet period; placing a hold with a `group_key` pushes the quiet period of
  every held message of that group (an album waits for its last item);
- `deadline`: the bound; past it the turn is requested with whatever is ready.

`message_received(..., held=True)` then requests nothing; `turn_holds_release` requests the
turn once the whole group is ready (or past its deadlines), for the group's newest message,
if any of them wanted an answer. Release is a conditional change of the holds' state under
their row locks, so a clear, a timer and the sweep racing each other request one turn. The
turn is requested through `turn_request`: the chat's busy and interrupt rules apply as to
any message, at that moment. Timers are Celery tasks (`chats.tasks.release_turn_hold`) sent
after the commit; the periodic turn sweep releases any hold whose timer was lost.

A channel that follows the turn answering its message (`/v1`, the terminal) asks
`turn_hold_poll` (or blocks in `turn_hold_wait`) until the hold is released, releasing it
itself once due. The terminal, which runs its turns in its own process, has its hold placed
with `respond=False` and requests the turn itself after the release.

A person's Stop (the dashboard's, the HTTP API's, `/stop`) stops a held turn too
(`chat_stop`, `turn_holds_cancel`): the held messages are released without a turn, so they
stay in the history (their files go on being read) and no turn runs for them.
"""

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from chats.agent.turns import turn_request, turn_stop
from chats.models import Chat, Message, Turn, TurnHold
from chats.signals import held_turn_requested

logger = logging.getLogger(__name__)

RELEASE_TASK = "chats.tasks.release_turn_hold"
# Holds released per sweep at most; the next sweep takes the rest.
SWEEP_BATCH = 200


def turn_hold_place(
    *,
    message: Message,
    deadline_seconds: float,
    reason: str = "",
    quiet_seconds: float = 0.0,
    group_key: str = "",
    respond: bool = False,
) -> TurnHold:
    """Hold `message`'s turn (in the caller's transaction): until `reason` is cleared and
    `quiet_seconds` have passed (for every held message of `group_key` in the chat), at
    most `deadline_seconds`. Placing again merges: reasons add up, times only move later,
    `respond` once wanted stays wanted."""
    now = timezone.now()
    not_before = now + timedelta(seconds=quiet_seconds)
    deadline = max(not_before, now + timedelta(seconds=deadline_seconds))
    with transaction.atomic():
        hold, created = TurnHold.objects.select_for_update().get_or_create(
            message=message,
            defaults={
                "chat_id": message.chat_id,
                "group_key": group_key,
                "reasons": [reason] if reason else [],
                "respond": respond,
                "not_before": not_before,
                "deadline": deadline,
                "created_at": now,
            },
        )
        if not created and hold.state == TurnHold.State.HELD:
            if reason and reason not in hold.reasons:
                hold.reasons = [*hold.reasons, reason]
            hold.respond = hold.respond or respond
            hold.group_key = hold.group_key or group_key
            hold.not_before = max(hold.not_before, not_before)
            hold.deadline = max(hold.deadline, deadline)
            hold.save(update_fields=["reasons", "respond", "group_key", "not_before", "deadline"])
        if hold.group_key:
            # The album is quiet only after its last item: every held item waits as long.
            TurnHold.objects.filter(
                chat_id=hold.chat_id,
                group_key=hold.group_key,
                state=TurnHold.State.HELD,
                not_before__lt=hold.not_before,
            ).update(not_before=hold.not_before)
    if hold.state == TurnHold.State.HELD:
        hold_id, first, last = hold.pk, hold.not_before, hold.deadline
        transaction.on_commit(lambda: _schedule(hold_id, first))
        if last > first:
            transaction.on_commit(lambda: _schedule(hold_id, last))
    return hold


def _schedule(hold_id: int, at) -> None:
    """A timer that tries the release at `at`; a lost one leaves it to the sweep."""
    from hermes_site.celery import app

    try:
        app.send_task(RELEASE_TASK, args=[hold_id], eta=at + timedelta(milliseconds=50))
    except Exception:  # noqa: BLE001 - the broker is down: the periodic sweep releases it
        logger.warning("could not schedule the release of turn hold %s", hold_id, exc_info=True)


def turn_hold_clear(*, message_id: int, reason: str) -> Turn | None:
    """`reason` no longer holds the message's turn; release it if nothing else does. Returns
    the turn requested now, if any (None too when the message had no hold)."""
    with transaction.atomic():
        hold = TurnHold.objects.select_for_update().filter(message_id=message_id).first()
        if hold is None or hold.state != TurnHold.State.HELD:
            return None
        if reason in hold.reasons:
            hold.reasons = [r for r in hold.reasons if r != reason]
            hold.save(update_fields=["reasons"])
    return turn_holds_release(hold_id=hold.pk)


def turn_holds_release(*, hold_id: int) -> Turn | None:
    """Release a held message (with its whole group) if it is ready: every held message of
    the group quiet (`not_before` passed) and each waiting for nothing or past its deadline.
    Requests the turn of the group's newest message when one of them wanted an answer, and
    sends `held_turn_requested`. At most once, whoever calls first; returns that turn."""
    with transaction.atomic():
        hold = TurnHold.objects.select_for_update().filter(pk=hold_id).first()
        if hold is None or hold.state != TurnHold.State.HELD:
            return None
        group = [hold]
        if hold.group_key:
            group = list(
                TurnHold.objects.select_for_update()
                .filter(chat_id=hold.chat_id, group_key=hold.group_key, state=TurnHold.State.HELD)
                .order_by("message_id")
            )
        now = timezone.now()
        for member in group:
            if now < member.not_before or (member.reasons and now < member.deadline):
                return None
        newest = group[-1]
        TurnHold.objects.filter(pk__in=[m.pk for m in group], state=TurnHold.State.HELD).update(
            state=TurnHold.State.RELEASED, released_at=now
        )
        if not any(member.respond for member in group):
            return None
        message = Message.objects.select_related("chat").get(pk=newest.message_id)
        turn = turn_request(message=message)
        TurnHold.objects.filter(pk=newest.pk).update(turn=turn)
        for receiver, result in held_turn_requested.send_robust(sender=Turn, turn=turn):
            if isinstance(result, Exception):
                logger.error(
                    "held_turn_requested receiver %r failed for turn %s",
                    receiver,
                    turn.pk,
                    exc_info=(type(result), result, result.__traceback__),
                )
    return turn


def turn_holds_cancel(*, chat_id: int, reason: str) -> list[int]:
    """Release every held message of the chat without a turn, on a person's Stop: the
    messages stay, their files go on being read, and no turn is requested for them (the
    timers, the last file settling and the sweep find them released). Returns the ids of
    the messages that were held."""
    with transaction.atomic():
        held = list(
            TurnHold.objects.select_for_update()
            .filter(chat_id=chat_id, state=TurnHold.State.HELD)
            .values_list("pk", "message_id")
        )
        if held:
            TurnHold.objects.filter(pk__in=[pk for pk, _ in held]).update(
                state=TurnHold.State.RELEASED, released_at=timezone.now(), respond=False
            )
    if held:
        logger.info("held turns of chat %s stopped (%s): messages %s", chat_id, reason, held)
    return [message_id for _, message_id in held]


# What a person's Stop stops besides held messages: every turn not finished yet.
STOPPABLE = (Turn.Status.QUEUED, Turn.Status.RUNNING, Turn.Status.WAITING)


def chat_stop(*, chat: Chat, reason: str, statuses=STOPPABLE) -> int:
    """Stop what the agent is doing or about to do in `chat` on a person's request: held
    messages first (so a hold released meanwhile has its turn among those stopped next), then
    every turn in `statuses` (`turn_stop`). Returns how many turns and held messages it
    stopped; 0: nothing was going on."""
    stopped = len(turn_holds_cancel(chat_id=chat.pk, reason=reason))
    open_turns = Turn.objects.filter(chat=chat, status__in=statuses).values_list("pk", flat=True)
    for turn_id in list(open_turns):
        stopped += turn_stop(turn_id=turn_id, chat=chat, reason=reason)
    return stopped


def turn_holds_release_due() -> int:
    """Release the holds that should have been released already (their timer lost: a broker
    restart, a worker killed): ready and quiet, or past their deadline. Returns how many turns
    that requested."""
    now = timezone.now()
    quiet = TurnHold.objects.filter(state=TurnHold.State.HELD).filter(
        Q(deadline__lte=now) | Q(not_before__lte=now)
    )
    requested = 0
    rows = quiet.order_by("deadline").values_list("id", "deadline", "reasons")[:SWEEP_BATCH]
    for hold_id, deadline, reasons in list(rows):
        if (deadline <= now or not reasons) and turn_holds_release(hold_id=hold_id) is not None:
            requested += 1
    return requested


@dataclass(frozen=True)
class HoldState:
    """Where a message's hold stands for a channel that follows it: `held` while it holds
    the turn back; once released, `turn_id` is the turn its release requested (None: none,
    e.g. a hold placed with `respond=False` for a channel that requests its own turn)."""

    held: bool
    turn_id: int | None = None
    reasons: tuple[str, ...] = ()
    deadline: datetime | None = None  # while held: when it is released at the latest


def turn_hold_poll(message_id: int) -> HoldState:
    """The message's hold now (not held: no hold, or released), releasing it first when it
    is due (its reasons cleared and quiet, or past its deadline). A channel that follows a
    held message (`/v1`, the terminal) asks this until it is released: the release does not
    depend on the timer's Celery task reaching a worker. Safe to race the timer, the clear
    and the sweep: the release happens once (`turn_holds_release`)."""
    hold = TurnHold.objects.filter(message_id=message_id).first()
    if hold is None:
        return HoldState(held=False)
    if hold.state == TurnHold.State.HELD:
        now = timezone.now()
        if now >= hold.deadline or (not hold.reasons and now >= hold.not_before):
            turn_holds_release(hold_id=hold.pk)
            hold.refresh_from_db()
    if hold.state == TurnHold.State.HELD:
        return HoldState(held=True, reasons=tuple(hold.reasons), deadline=hold.deadline)
    return HoldState(held=False, turn_id=hold.turn_id)


def turn_hold_held(message_id: int) -> bool:
    """Whether the message's turn is held back now (an app placed a hold on it)."""
    return TurnHold.objects.filter(message_id=message_id, state=TurnHold.State.HELD).exists()


def turn_hold_wait(
    message_id: int, *, poll_seconds: float = 0.2, bound_seconds: float | None = None
) -> HoldState:
    """Block until the message's hold is released (`turn_hold_poll`), at most the hold's own
    deadline plus `bound_seconds` (default: 10 s; a release that keeps failing must not hang
    the caller). For a channel that runs its turns in its own process (the terminal)."""
    hold = TurnHold.objects.filter(message_id=message_id).first()
    if hold is None:
        return HoldState(held=False)
    slack = 10.0 if bound_seconds is None else bound_seconds
    give_up = hold.deadline + timedelta(seconds=slack)
    while True:
        state = turn_hold_poll(message_id)
        if not state.held or timezone.now() >= give_up:
            return state
        time.sleep(poll_seconds)
