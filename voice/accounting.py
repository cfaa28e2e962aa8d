"""Audio seconds in the usage ledger, and money caps before a paid transcription.

Every transcription is recorded (usage kind "transcription", its audio in `audio_ms`, a unit
of its own), attributed like any work done for a message: to the recording's author (usage's
rule). The local engine is free (cost 0); a remote server is priced per minute when
STT_PRICE_PER_MINUTE is set (unpriced otherwise: its cost shows as unknown, never zero).
Before a priced server is used, the money caps that apply (person, chat, hub) are checked
with that cost; a cap it would pass sends the recording to the free local engine instead.
Tokens caps never apply to seconds.
"""

from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.utils import timezone

from budgets.selectors import money_budget_check
from usage.models import NANOS
from usage.services import attribution_of_trigger, usage_record_transcription


def price_per_minute() -> Decimal | None:
    """STT_PRICE_PER_MINUTE as a Decimal, or None when unset (or not a number ≥ 0)."""
    try:
        price = Decimal(settings.STT_PRICE_PER_MINUTE)
    except (InvalidOperation, TypeError, ValueError):
        return None
    return price if price.is_finite() and price >= 0 else None


def remote_cost_nanos(seconds: float) -> int | None:
    price = price_per_minute()
    if price is None:
        return None
    return int((price * NANOS * Decimal(str(seconds)) / 60).to_integral_value())


def paid_refusal(attachment, seconds: float) -> str:
    """Why the paid server may not transcribe this recording (a money cap), else ""."""
    cost = remote_cost_nanos(seconds)
    if not cost:
        return ""
    person_id = attribution_of_trigger(attachment.message_id).person_id
    refusal = money_budget_check(
        person_id,
        attachment.message.chat_id,
        now=timezone.now(),
        pending_cost_nanos=cost,
    )
    return refusal.message if refusal is not None else ""


def record(attachment, *, engine: str, seconds: float) -> None:
    """The transcription's audio seconds (and cost) in the usage ledger."""
    cost = 0 if engine.startswith("local:") else remote_cost_nanos(seconds)
    usage_record_transcription(
        message_id=attachment.message_id,
        chat_id=attachment.message.chat_id,
        engine=engine,
        audio_ms=int(round(seconds * 1000)),
        cost_nanos=cost,
    )
