"""Reads of the Telegram bridge."""

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from bots.models import PairingRequest
from chats.extras import outbound_text
from chats.models import Actor, Channel, Turn
from chats.reply_files import ReplyFile, reply_files


@dataclass(frozen=True)
class TurnOutcome:
    status: str
    reply_text: str
    error: str
    reason: str


def turn_outcome(*, turn_id: int) -> TurnOutcome | None:
    """How a turn ended, from the database (None while it is queued or running)."""
    turn = Turn.objects.select_related("reply").filter(pk=turn_id).first()
    if turn is None:
        return TurnOutcome(Turn.Status.INTERRUPTED, "", "", "the turn was deleted")
    if not turn.is_finished:
        return None
    return TurnOutcome(
        status=turn.status,
        reply_text=turn.reply.text if turn.reply else "",
        error=turn.error,
        reason=turn.interrupt_reason,
    )


def turn_outbound_text(*, turn_id: int, text: str) -> str:
    """The final text of a turn's reply as Telegram sends it: the registered outbound
    filters applied (chats.extras.outbound_text; knowledge's citations, say)."""
    turn = Turn.objects.select_related("reply__chat").filter(pk=turn_id).first()
    return outbound_text(turn.reply if turn else None, text)


def turn_reply_files(*, turn_id: int) -> list[ReplyFile]:
    """The files the turn's reply message carries (through the reply files registry)."""
    turn = Turn.objects.select_related("reply").filter(pk=turn_id).first()
    return reply_files(turn.reply if turn else None)


def pairing_requests(*, status: str) -> list[PairingRequest]:
    """Pairing requests in one status, newest first (for the staff page)."""
    return list(PairingRequest.objects.filter(status=status).select_related("decided_by")[:200])


def telegram_actors_of(*, person: AbstractBaseUser) -> list[Actor]:
    """The Telegram users linked to `person`."""
    return list(Actor.objects.filter(channel=Channel.TELEGRAM, person=person).order_by("id"))
