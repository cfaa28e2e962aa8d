"""JSON shapes of the API's objects; one function per object so every endpoint agrees."""

from chats.models import Chat, Message


def message_json(message: Message) -> dict:
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
        "ts": message.source_ts or message.created_at,
        "stored_at": message.created_at,
        "token_count": message.token_count,
    }


def chat_json(chat: Chat, *, role: str | None) -> dict:
    return {
        "chat_key": chat.chat_key,
        "channel": chat.channel,
        "kind": chat.kind,
        "title": chat.title,
        "last_activity_at": chat.last_activity_at,
        "role": role,
    }


def search_hit_json(hit) -> dict:
    return {
        "chat_key": hit.message.chat.chat_key,
        "message": message_json(hit.message),
        "snippet": hit.snippet,
        "highlights": [[start, end] for start, end in hit.highlights],
    }
