"""The message post fields registry: fields other apps add to `POST /api/v1/messages` (its
`files`, say), without the API knowing what they are.

An app registers a `PostField` in its `AppConfig.ready()`:

- `parse(value)` checks the field's JSON value before anything is written and returns what
  `store` needs (a bad value raises `ApiError`, so a bad request stores nothing);
- `store(message, parsed)` runs once the message is newly stored (never for a duplicate),
  before its turn is requested, so the agent's turn starts with what it stored; it returns
  the keys it adds to the answer and, when it refused part of it (the message is kept), an
  `error` and the status to answer with; and, when what it stored must be ready before the
  turn (files still being processed), a `turn_request` that requests the turn or holds it
  (chats.agent.holds), returning the turn (None when held) and keys for the answer.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chats.models import Message


@dataclass(frozen=True)
class PostFieldOutcome:
    """What a field's `store` adds to the answer; `status` and `error` when it refused some
    of it (the message and the rest are kept)."""

    body: dict = field(default_factory=dict)
    status: int | None = None
    error: dict | None = None  # {"code": …, "message": …}, the API's error shape
    # (message) -> (the turn or None when held, keys for the answer); None: request it now.
    turn_request: Callable[["Message"], tuple[Any, dict]] | None = None


@dataclass(frozen=True)
class PostField:
    name: str
    parse: Callable[[Any], Any]
    store: Callable[["Message", Any], PostFieldOutcome]


_fields: dict[str, PostField] = {}


def register_post_field(post_field: PostField) -> None:
    """Accept `post_field.name` in message posts (idempotent, by name)."""
    _fields[post_field.name] = post_field


def post_field_names() -> tuple[str, ...]:
    return tuple(sorted(_fields))


def post_fields_parse(payload: dict) -> list[tuple[PostField, Any]]:
    """Take every registered field out of `payload` (so the message's own parsing does not
    see it) and parse it; ApiError for a bad value."""
    parsed = []
    for name in post_field_names():
        if name in payload:
            value = payload.pop(name)
            if value is not None:
                parsed.append((_fields[name], _fields[name].parse(value)))
    return parsed


def post_fields_store(message: "Message", parsed: list[tuple[PostField, Any]]) -> PostFieldOutcome:
    """Store every parsed field on the newly stored `message`; their answers merged (the
    highest status and every error, when some refused)."""
    body, statuses, errors, turn_request = {}, [], [], None
    for post_field, value in parsed:
        outcome = post_field.store(message, value)
        body.update(outcome.body)
        turn_request = turn_request or outcome.turn_request
        if outcome.error is not None:
            statuses.append(outcome.status or 400)
            errors.append(outcome.error)
    if not errors:
        return PostFieldOutcome(body=body, turn_request=turn_request)
    error = {
        "code": errors[0]["code"],
        "message": " ".join(e["message"] for e in errors),
    }
    return PostFieldOutcome(body=body, status=max(statuses), error=error, turn_request=turn_request)
