"""The content parts registry: what `/v1` accepts besides text in a message's `content` (an
image, a file), without the endpoint knowing what they are.

An app registers a handler for some part types (`image_url`, `input_image`, …) in its
`AppConfig.ready()`. Parsing keeps the parts of the conversation's last user message as they
came (`ContentPart`); before anything is stored, `content_parts_resolve` asks each part's
handler to `resolve` it (decode a `data:` URL, fetch an URL: it may do I/O, and it refuses a
bad part with `ContentPartRefused`, which the endpoint answers as a 400 in OpenAI's shape);
once the user message is newly stored, inside its transaction and before its turn is
requested, `content_parts_store` asks the handler to `store` what it resolved on it. A part
of a type nobody registered is refused, as before this registry.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chats.models import Message


class ContentPartRefused(Exception):
    """A part the hub will not take: `str(exc)` says why; `param` names the part, `status`
    is the HTTP status (400, or 413 for a part over a size limit), `code` OpenAI's `code`."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        code: str = "invalid_content_part",
    ):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


@dataclass(frozen=True)
class ContentPart:
    """One non-text part as the client sent it; `param` names it (`messages[2].content[1]`)."""

    type: str
    body: dict
    param: str


@dataclass(frozen=True)
class ContentPartHandler:
    name: str
    types: tuple[str, ...]
    # (part) -> what to store; may do I/O; raises ContentPartRefused.
    resolve: Callable[[ContentPart], Any]
    # (message, [what resolve returned, in order]) -> None; raises ContentPartRefused.
    store: Callable[["Message", list], None]


_handlers: dict[str, ContentPartHandler] = {}


def register_content_part_handler(handler: ContentPartHandler) -> None:
    """Take `handler.types` in `/v1` messages (idempotent; a type has one handler)."""
    for other in _handlers.values():
        clash = set(other.types) & set(handler.types)
        if other.name != handler.name and clash:
            raise ValueError(f"content part type {sorted(clash)[0]!r} already has a handler")
    _handlers[handler.name] = handler


def accepted_part_types() -> tuple[str, ...]:
    """Every non-text part type some handler takes."""
    return tuple(sorted(t for handler in _handlers.values() for t in handler.types))


def _handler_for(part_type: str) -> ContentPartHandler | None:
    return next((h for h in _handlers.values() if part_type in h.types), None)


@dataclass(frozen=True)
class ResolvedParts:
    """What the handlers resolved, grouped by handler, in the order the parts came."""

    by_handler: tuple[tuple[ContentPartHandler, tuple], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.by_handler)


def content_parts_resolve(parts: Sequence[ContentPart]) -> ResolvedParts:
    """Every part resolved by its handler, or ContentPartRefused for the first bad one
    (nothing is stored yet when this runs)."""
    grouped: dict[str, tuple[ContentPartHandler, list]] = {}
    for part in parts:
        handler = _handler_for(part.type)
        if handler is None:
            raise ContentPartRefused(
                f"{part.param}: content parts of type {part.type!r} are not supported.",
                param=part.param,
            )
        grouped.setdefault(handler.name, (handler, []))[1].append(handler.resolve(part))
    return ResolvedParts(tuple((handler, tuple(items)) for handler, items in grouped.values()))


def content_parts_store(message: "Message", resolved: ResolvedParts) -> None:
    """Hand each handler what it resolved, to store on the newly stored `message`."""
    for handler, items in resolved.by_handler:
        handler.store(message, list(items))
