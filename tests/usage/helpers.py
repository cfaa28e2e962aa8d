"""Shared helpers of the usage tests: messages from each kind of author, prices, sums."""

from datetime import date
from decimal import Decimal

from chats.agent.turns import message_received
from chats.services import message_ingest
from usage.models import ModelPrice, UsageDay, UsageRecord


def say(text, *, chat_id="room", user="u1", channel="api", **extra):
    """A user message and its queued turn (not enqueued: the test runs it)."""
    result = message_ingest(
        channel=channel, chat_id=chat_id, user_id=user, user_name=user, text=text, **extra
    )
    return message_received(result, enqueue=False)


def price(model, input_per_million, output_per_million, valid_from=date(2000, 1, 1)):
    return ModelPrice.objects.create(
        model=model,
        input_per_million=Decimal(str(input_per_million)),
        output_per_million=Decimal(str(output_per_million)),
        valid_from=valid_from,
    )


def day_sums(**filters) -> dict:
    """The daily sums' totals (what the pages read)."""
    rows = UsageDay.objects.filter(**filters)
    return {
        "calls": sum(r.calls for r in rows),
        "prompt": sum(r.prompt_tokens for r in rows),
        "completion": sum(r.completion_tokens for r in rows),
        "cost_nanos": sum(r.cost_nanos for r in rows),
        "unpriced_tokens": sum(r.unpriced_tokens for r in rows),
    }


def record_sums(**filters) -> dict:
    """The same totals straight from the ledger."""
    rows = UsageRecord.objects.filter(**filters)
    return {
        "calls": sum(r.calls for r in rows),
        "prompt": sum(r.prompt_tokens for r in rows),
        "completion": sum(r.completion_tokens for r in rows),
        "cost_nanos": sum(r.cost_nanos or 0 for r in rows),
        "unpriced_tokens": sum(
            r.prompt_tokens + r.completion_tokens for r in rows if r.cost_nanos is None
        ),
    }


def nanos(tokens_in, tokens_out, price_in, price_out) -> int:
    """The expected cost in billionths, computed independently of the app (Decimal)."""
    exact = (
        Decimal(tokens_in) * Decimal(str(price_in)) + Decimal(tokens_out) * Decimal(str(price_out))
    ) * 1000
    return int(exact.to_integral_value(rounding="ROUND_HALF_UP"))
