"""The message extras registry: what other apps hang on a message (its files, say), asked
by everything that shows messages (the HTTP API's history, …) without `chats` knowing what
they are.

An app registers `(name, provider, default)` in its `AppConfig.ready()`; a provider takes a
list of messages and returns `{message pk: value}` for those it has something for (one
query for the whole page, not one per message); the others get `default()`. Each name
becomes a key of the message's JSON.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chats.models import Message

logger = logging.getLogger(__name__)

MessageExtrasProvider = Callable[[Sequence["Message"]], dict[int, Any]]


@dataclass(frozen=True)
class _Extra:
    name: str
    provider: MessageExtrasProvider
    default: Callable[[], Any]


_extras: dict[str, _Extra] = {}


def register_message_extras(
    name: str, provider: MessageExtrasProvider, *, default: Callable[[], Any] = lambda: None
) -> None:
    """Add `name` to every message's extras, its value from `provider` (idempotent)."""
    _extras[name] = _Extra(name, provider, default)


def message_extras(messages: Sequence["Message"]) -> dict[int, dict[str, Any]]:
    """`{message pk: {name: value}}` for every message and every registered extra. A provider
    that fails is logged and its default used: a broken extra never hides the history."""
    result: dict[int, dict[str, Any]] = {message.pk: {} for message in messages}
    for extra in _extras.values():
        try:
            values = extra.provider(messages) if messages else {}
        except Exception:  # noqa: BLE001 - one app's failure must not hide the history
            logger.exception("message extras provider %r failed", extra.name)
            values = {}
        for pk, fields in result.items():
            fields[extra.name] = values[pk] if pk in values else extra.default()
    return result
