"""The staged registry: what a channel's session staged for the person's next message (the
terminal's `/attach PATH` stages files), stored on that message before its turn is requested.

An app registers `(name, consumer)` in `AppConfig.ready()`; a channel that keeps a session
dict (the terminal) calls `staged_store(message=…, session=…)` right after it stored a new
message; each consumer stores what it staged in `session` on the message, clears it, and
returns lines to show the person ("Attached report.pdf …", or why a file was not). A consumer
that fails is logged and the message still gets its turn: nothing staged is worth losing the
person's words.
"""

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chats.models import Message

logger = logging.getLogger(__name__)

StagedConsumer = Callable[["Message", dict], list[str]]
_consumers: dict[str, StagedConsumer] = {}


def register_staged_consumer(name: str, consumer: StagedConsumer) -> None:
    """Store what `name` stages in a session on the session's next message (idempotent)."""
    _consumers[name] = consumer


def staged_store(*, message: "Message", session: dict) -> list[str]:
    """Hand the newly stored `message` to every consumer; the lines they return, in order."""
    lines: list[str] = []
    for name, consumer in _consumers.items():
        try:
            lines += consumer(message, session)
        except Exception:  # noqa: BLE001 - the message and its turn go on regardless
            logger.exception("staged consumer %r failed", name)
            lines.append(f"Could not store what /{name} staged; the message was sent without it.")
    return lines
