"""JSON shapes of the API's objects; one function per object so every endpoint agrees.

A message is shown as its reader (the token's person) reads it: other apps may render its
text for them (chats.extras.message_texts: knowledge's `[K<id>]` citations name the passage
only to its readers), as the dashboard does; the stored text is unchanged."""

from collections.abc import Sequence

from chats.extras import message_extras, message_texts, reader_snippet
from chats.models import Chat, Message, Turn
from chats.payloads import message_payload


def message_json(
    message: Message, *, person, extras: dict | None = None, text: str | None = None
) -> dict:
    """A message as `person` reads it, with what other apps hang on it (chats.extras: its
    attachments, …). `extras` and `text` when asked for a whole list at once."""
    payload = message_payload(message)
    del payload["metadata"]  # internal bookkeeping (turn ids, tool call ids), not API surface
    if extras is None:
        extras = message_extras([message])[message.pk]
    if text is None:
        text = message_texts([message], person, links=True).get(message.pk)
    if text is not None:
        payload["text"] = text
    payload.update(extras)
    return payload


def messages_json(messages: Sequence[Message], *, person) -> list[dict]:
    """`message_json` of each message, the extras and texts asked once for the whole list."""
    extras = message_extras(messages)
    texts = message_texts(messages, person, links=True)
    return [
        message_json(m, person=person, extras=extras[m.pk], text=texts.get(m.pk, m.text))
        for m in messages
    ]


def search_hits_json(hits, *, person) -> list[dict]:
    """`search_hit_json` of each hit, the message extras and texts asked once for all."""
    messages = [hit.message for hit in hits]
    extras = message_extras(messages)
    texts = message_texts(messages, person, links=True)
    return [
        search_hit_json(
            hit,
            person=person,
            extras=extras[hit.message.pk],
            text=texts.get(hit.message.pk, hit.message.text),
        )
        for hit in hits
    ]


def chat_json(chat: Chat, *, role: str | None) -> dict:
    return {
        "chat_key": chat.chat_key,
        "channel": chat.channel,
        "kind": chat.kind,
        "title": chat.title,
        "last_activity_at": chat.last_activity_at,
        "role": role,
    }


def search_hit_json(hit, *, person, extras: dict | None = None, text: str | None = None) -> dict:
    if text is None:
        text = message_texts([hit.message], person, links=True).get(hit.message.pk)
    snippet, highlights = reader_snippet(hit, person, text)
    return {
        "chat_key": hit.message.chat.chat_key,
        "message": message_json(hit.message, person=person, extras=extras, text=text),
        "snippet": snippet,
        "highlights": [[start, end] for start, end in highlights],
        # Set when the words were found inside a file on the message (the snippet is then
        # from the file's text): {"source": "attachments", "kind": "file", "id", "name"}.
        "matched_in": _matched_in_json(hit),
    }


def _matched_in_json(hit) -> dict | None:
    found = getattr(hit, "matched_in", None)
    if found is None:
        return None
    return {"source": found.source, "kind": found.noun, "id": found.id, "name": found.name}


def turn_json(turn: Turn, *, person) -> dict:
    return {
        "id": turn.pk,
        "chat_key": turn.chat.chat_key,
        "status": turn.status,
        "trigger_id": turn.trigger_id,
        "reply": message_json(turn.reply, person=person) if turn.reply_id and turn.reply else None,
        "model": turn.model,
        "usage": {
            "prompt_tokens": turn.prompt_tokens,
            "completion_tokens": turn.completion_tokens,
            "iterations": turn.iterations,
        },
        "latency_ms": turn.latency_ms,
        "error": turn.error or None,
        "interrupt_reason": turn.interrupt_reason or None,
        "waiting_for": turn.wait_reason or None,
        "created_at": turn.created_at,
        "started_at": turn.started_at,
        "finished_at": turn.finished_at,
        "events_url": f"/api/v1/turns/{turn.pk}/events",
    }
