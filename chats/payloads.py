"""The JSON shape of a message, shared by the HTTP API and the events, so every client
(API callers, SSE streams, the dashboard, the Telegram bridge) reads one format."""

from django.core.serializers.json import DjangoJSONEncoder

from chats.models import Message

_encoder = DjangoJSONEncoder()


def iso(moment) -> str:
    """UTC ISO 8601 with milliseconds and `Z`, as every JSON response of the hub writes it."""
    return _encoder.default(moment)


def message_payload(message: Message) -> dict:
    """A message as JSON-ready data: ids, role, text, author, when it was said and stored."""
    actor = message.actor
    return {
        "id": message.pk,
        "message_id": message.external_id,
        "role": message.role,
        "text": message.text,
        "author": None
        if actor is None
        else {"user_id": actor.external_id, "name": actor.display_name},
        # When it was said (platform time when the sender gave one), then when we stored it.
        "ts": iso(message.source_ts or message.created_at),
        "stored_at": iso(message.created_at),
        "token_count": message.token_count,
        "metadata": message.metadata,
    }
