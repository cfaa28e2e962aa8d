"""Building and parsing `chat_key` and `actor_key`.

`chat_key = "<channel>:<chat_id>[:topic:<thread_id>]"`. The key must be injective: two
different (channel, chat_id, thread_id) triples never give the same key. Channels are
restricted to a small alphabet without `:`; ids are percent-escaped (`%` → `%25`,
`:` → `%3A`), so a `:` in a key is always a separator and an id such as
`"42:topic:7"` cannot pose as a topic of chat 42.
"""

import re
from dataclasses import dataclass

CHANNEL_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MAX_ID_LENGTH = 255
TOPIC = "topic"


class InvalidKey(ValueError):
    """A channel or id that cannot be part of a key (the message says which and why)."""


def _escape(value: str) -> str:
    return value.replace("%", "%25").replace(":", "%3A")


def escape_part(value: str) -> str:
    """`value` escaped like the ids inside keys, so it can be joined with `:` unambiguously."""
    return _escape(value)


def _unescape(value: str) -> str:
    return value.replace("%3A", ":").replace("%3a", ":").replace("%25", "%")


def validate_channel(channel: str) -> str:
    if not isinstance(channel, str) or not CHANNEL_RE.match(channel):
        raise InvalidKey(
            "channel must be 1-32 characters: a lowercase letter, then lowercase letters, "
            f"digits, '_' or '-' (got {channel!r})"
        )
    return channel


def validate_id(value: object, field: str) -> str:
    """Accept a non-empty string (or an integer, as Telegram sends) without control characters."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidKey(f"{field} must be a string or an integer")
    text = str(value)
    if not text or not text.strip():
        raise InvalidKey(f"{field} must not be empty")
    if len(text) > MAX_ID_LENGTH:
        raise InvalidKey(f"{field} must be at most {MAX_ID_LENGTH} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise InvalidKey(f"{field} must not contain control characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidKey(f"{field} is not valid Unicode (lone surrogate)") from exc
    return text


def make_chat_key(channel: str, chat_id: object, thread_id: object | None = None) -> str:
    """Return the injective key of a chat, validating every part."""
    channel = validate_channel(channel)
    chat_id = validate_id(chat_id, "chat_id")
    key = f"{channel}:{_escape(chat_id)}"
    if thread_id is not None and thread_id != "":
        key += f":{TOPIC}:{_escape(validate_id(thread_id, 'thread_id'))}"
    return key


def make_actor_key(channel: str, chat_id: object, user_id: object) -> str:
    """Return `<channel>:<chat_id>:<user_id>`, escaped like chat keys (metadata only)."""
    channel = validate_channel(channel)
    return (
        f"{channel}:{_escape(validate_id(chat_id, 'chat_id'))}:"
        f"{_escape(validate_id(user_id, 'user_id'))}"
    )


@dataclass(frozen=True)
class ChatKeyParts:
    channel: str
    chat_id: str
    thread_id: str | None


def parse_chat_key(key: str) -> ChatKeyParts:
    """Split a chat key into its parts; raises InvalidKey for anything make_chat_key never makes."""
    parts = key.split(":") if isinstance(key, str) else []
    if len(parts) == 2:
        channel, chat_id, thread_id = parts[0], parts[1], None
    elif len(parts) == 4 and parts[2] == TOPIC:
        channel, chat_id, thread_id = parts[0], parts[1], parts[3]
    else:
        raise InvalidKey(f"not a chat key: {key!r}")
    parsed = ChatKeyParts(
        channel, _unescape(chat_id), None if thread_id is None else _unescape(thread_id)
    )
    if make_chat_key(parsed.channel, parsed.chat_id, parsed.thread_id) != key:
        raise InvalidKey(f"not a canonical chat key: {key!r}")
    return parsed
