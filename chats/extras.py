"""The message extras registry: what other apps hang on a message (its files, say), asked
by everything that shows messages (the HTTP API's history, …) without `chats` knowing what
they are.

An app registers `(name, provider, default)` in its `AppConfig.ready()`; a provider takes a
list of messages and returns `{message pk: value}` for those it has something for (one
query for the whole page, not one per message); the others get `default()`. Each name
becomes a key of the message's JSON. The dashboard's HTML of the same: see "HTML on the
dashboard" below.
"""

import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.utils.safestring import SafeString

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


# --- HTML on the dashboard -----------------------------------------------------------------
#
# The same idea for the pages: an app registers `(name, renderer)`, a renderer takes the
# messages of a page and returns `{message pk: HTML}` (already escaped by the app's own
# template) for those it has something to show; the dashboard puts each message's HTML under
# its text. `chats` never learns what the HTML shows (files, say).

#
# A renderer registered with `per_person=True` is called as `renderer(messages, person)`,
# `person` being who views the page (None when unknown): for HTML that depends on what that
# person may do or read (knowledge's "add to a collection" for its maintainers, say).

MessageHtmlRenderer = Callable[..., dict[int, str]]

_html: dict[str, tuple[MessageHtmlRenderer, bool]] = {}


def register_message_html(
    name: str, renderer: MessageHtmlRenderer, *, per_person: bool = False
) -> None:
    """Add `name`'s HTML under every message the dashboard shows (idempotent, by name)."""
    _html[name] = (renderer, per_person)


def message_extras_html(messages: Sequence["Message"], person=None) -> dict[int, "SafeString"]:
    """`{message pk: HTML}` for the messages any renderer has something for, the renderers'
    pieces in registration order. A renderer that fails is logged and left out."""
    from django.utils.safestring import mark_safe

    pieces: dict[int, list[str]] = {}
    for name, (renderer, per_person) in _html.items():
        try:
            if not messages:
                rendered = {}
            else:
                rendered = renderer(messages, person) if per_person else renderer(messages)
        except Exception:  # noqa: BLE001 - one app's failure must not hide the history
            logger.exception("message HTML renderer %r failed", name)
            continue
        for pk, html in rendered.items():
            if html:
                pieces.setdefault(pk, []).append(html)
    return {pk: mark_safe("".join(parts)) for pk, parts in pieces.items()}  # noqa: S308


def with_extras_html(messages: Sequence["Message"], person=None) -> Sequence["Message"]:
    """Set `extras_html` on each message (what the `message` partial shows under its text)
    and `body_html` where a body renderer rendered its text for `person` (the viewer); one
    call per page, so each renderer queries once."""
    shown = [m for m in messages if m is not None]
    html = message_extras_html(shown, person)
    bodies = message_bodies_html(shown, person)
    for message in messages:
        if message is not None:
            message.extras_html = html.get(message.pk, "")
            message.body_html = bodies.get(message.pk, "")
    return messages


# A message's text as a viewer reads it: a body renderer `(messages, person) -> {pk: HTML}`
# returns the whole rendered text (chats.markdown.render_markdown, then its own marks) for
# the messages it changes, for that viewer (knowledge's citations link to a passage only for
# those who may read it). The first renderer with an answer for a message wins; a failing
# renderer is logged and the plain Markdown shown.

MessageBodyRenderer = Callable[[Sequence["Message"], Any], dict[int, str]]

_bodies: dict[str, MessageBodyRenderer] = {}


def register_message_body(name: str, renderer: MessageBodyRenderer) -> None:
    """Let `name` render message texts for their viewer (idempotent, by name)."""
    _bodies[name] = renderer


def message_bodies_html(messages: Sequence["Message"], person=None) -> dict[int, "SafeString"]:
    """`{message pk: HTML}` of the texts a body renderer rendered for `person`."""
    from django.utils.safestring import mark_safe

    result: dict[int, SafeString] = {}
    for name, renderer in _bodies.items():
        try:
            rendered = renderer(messages, person) if messages else {}
        except Exception:  # noqa: BLE001 - the plain Markdown is shown instead
            logger.exception("message body renderer %r failed", name)
            continue
        for pk, html in rendered.items():
            if html and pk not in result:
                result[pk] = mark_safe(html)  # noqa: S308 - the renderer escapes
    return result


# The composer's part: an app adds controls to the dashboard's composer (attaching files,
# say) with a renderer `(chat, person) -> HTML`, asked only where the person may post.

ComposerHtmlRenderer = Callable[[Any, Any], str]

_composer: dict[str, ComposerHtmlRenderer] = {}


def register_composer_html(name: str, renderer: ComposerHtmlRenderer) -> None:
    """Add `name`'s controls to the dashboard's composer (idempotent, by name)."""
    _composer[name] = renderer


def composer_extras_html(chat, person) -> "SafeString":
    """The registered composer controls for `person` in `chat`, in registration order; a
    renderer that fails is logged and left out (the composer still sends text)."""
    from django.utils.safestring import mark_safe

    parts = []
    for name, renderer in _composer.items():
        try:
            parts.append(renderer(chat, person) or "")
        except Exception:  # noqa: BLE001 - one app's failure must not take the composer
            logger.exception("composer HTML renderer %r failed", name)
    return mark_safe("".join(parts))  # noqa: S308 - each app escapes in its own template


# A reply as a channel that shows no dashboard links sends it (Telegram): a filter
# `(message, text) -> text` rewrites what it knows in the text (knowledge's `[K<id>]`
# citations become "document § section", or a hidden note where the chat may not read it).
# Filters run in registration order; one that fails is logged and skipped.

# A draft filter does the same for a reply still being streamed (Telegram's previews), before
# it is stored: `(chat id, text) -> text`, an unfinished mark at the end left out until the
# next preview shows it whole.

OutboundTextFilter = Callable[["Message", str], str]
OutboundDraftFilter = Callable[[int, str], str]

_outbound: dict[str, OutboundTextFilter] = {}
_outbound_drafts: dict[str, OutboundDraftFilter] = {}


def register_outbound_text(
    name: str, text_filter: OutboundTextFilter, *, draft: OutboundDraftFilter | None = None
) -> None:
    """Let `name` rewrite replies sent outside the dashboard (idempotent, by name), and their
    streamed previews with `draft`."""
    _outbound[name] = text_filter
    if draft is not None:
        _outbound_drafts[name] = draft


def outbound_draft_text(chat_id: int, text: str) -> str:
    """A reply being streamed in `chat_id` as a channel previews it: every draft filter
    applied, an unfinished mark at the end left out (the next preview shows it whole)."""
    for name, draft in _outbound_drafts.items():
        try:
            text = draft(chat_id, text)
        except Exception:  # noqa: BLE001 - previewed as written
            logger.exception("outbound draft filter %r failed", name)
    return text


def has_outbound_draft() -> bool:
    """Whether any app rewrites streamed previews (else previews skip the query)."""
    return bool(_outbound_drafts)


def outbound_text(message: "Message | None", text: str) -> str:
    """`text` of `message` as a channel sends it, every registered filter applied."""
    if message is None or not text:
        return text
    for name, text_filter in _outbound.items():
        try:
            text = text_filter(message, text)
        except Exception:  # noqa: BLE001 - the text as stored is sent instead
            logger.exception("outbound text filter %r failed", name)
    return text


# A message's text as one reader reads it where there is no HTML (the HTTP API's history,
# the OpenAI-compatible /v1): a text renderer `(messages, person, links) -> {pk: text}`
# returns the texts it changes for that reader (knowledge's `[K<id>]` citations name the
# passage only to its readers; `links` where the surface shows Markdown links to the
# dashboard). A draft renderer does the same for a reply still being streamed, before it is
# stored: `(chat id, person, text) -> (text, held)`, `held` being an unfinished mark at the
# end to send with the next piece. A failing renderer is logged and the text sent as stored.

MessageTextRenderer = Callable[..., dict[int, str]]
DraftTextRenderer = Callable[[int, Any, str], tuple[str, str]]

_texts: dict[str, tuple[MessageTextRenderer, DraftTextRenderer | None]] = {}


def register_message_text(
    name: str, renderer: MessageTextRenderer, *, draft: DraftTextRenderer | None = None
) -> None:
    """Let `name` render message texts for their reader outside the dashboard (idempotent)."""
    _texts[name] = (renderer, draft)


def message_texts(messages: Sequence["Message"], person, *, links: bool = False) -> dict[int, str]:
    """`{message pk: text}` of the texts a text renderer changed for `person` (the first
    renderer with an answer for a message wins, as for the dashboard's bodies)."""
    result: dict[int, str] = {}
    for name, (renderer, _) in _texts.items():
        if not messages:
            break
        try:
            rendered = renderer(messages, person, links=links)
        except Exception:  # noqa: BLE001 - the stored text is sent instead
            logger.exception("message text renderer %r failed", name)
            continue
        for pk, text in rendered.items():
            result.setdefault(pk, text)
    return result


def message_text(message: "Message", person, *, links: bool = False) -> str:
    """The text of one `message` as `person` reads it (`message_texts` of one)."""
    return message_texts([message], person, links=links).get(message.pk, message.text)


def draft_text(chat_id: int, person, text: str) -> tuple[str, str]:
    """A streamed piece of a reply in `chat_id` as `person` reads it, and what to hold back
    until the next piece (every draft renderer applied)."""
    held = ""
    for name, (_, draft) in _texts.items():
        if draft is None:
            continue
        try:
            text, more = draft(chat_id, person, text)
        except Exception:  # noqa: BLE001 - sent as written
            logger.exception("draft text renderer %r failed", name)
            continue
        held = more + held
    return text, held


def has_draft_text() -> bool:
    """Whether any app renders streamed replies (else streams skip the work)."""
    return any(draft is not None for _, draft in _texts.values())


def reader_snippet(hit, person, text: str | None) -> tuple[str, list[tuple[int, int]]]:
    """A search hit's snippet and highlights as `person` reads them, `text` being the hit's
    message text as they read it (`message_texts`; None or the stored text: unchanged).

    The snippet is cut from the stored text, so where a renderer gave them another text it
    must follow: a reply's marks are local, so each stretch between highlight bounds is
    rendered alone and the highlights moved to match; any other message (a tool result
    without the passages they may not read) shows the start of its text as they read it,
    unhighlighted. A snippet from a file's text is left as it is."""
    from chats.models import Message

    snippet, highlights = hit.snippet, list(hit.highlights)
    if text is None or text == hit.message.text or getattr(hit, "matched_in", None):
        return snippet, highlights
    if hit.message.role != Message.Role.ASSISTANT:
        return text[: max(len(snippet), 80)], []
    bounds = sorted({0, len(snippet), *(b for span in highlights for b in span)})
    pieces, moved = [], {0: 0}
    for start, end in zip(bounds, bounds[1:], strict=False):
        piece = snippet[start:end]
        if "[" in piece:
            fragment = copy.copy(hit.message)
            fragment.text = piece
            piece = message_texts([fragment], person).get(fragment.pk, piece)
        pieces.append(piece)
        moved[end] = moved[start] + len(piece)
    return "".join(pieces), [(moved[start], moved[end]) for start, end in highlights]


class DraftStream:
    """A reply's streamed pieces in `chat_id` as `person` reads them (`draft_text`), an
    unfinished mark at a piece's end held until the next piece. Shared by the API's turn
    stream and the /v1 streams; `piece` reads the database (call it off the event loop),
    and only for a piece that may hold a mark."""

    def __init__(self, chat_id: int, person):
        self.chat_id, self.person = chat_id, person
        self.held = ""
        self.active = has_draft_text()

    def needs_database(self, delta: str) -> bool:
        return self.active and (bool(self.held) or "[" in delta)

    def piece(self, delta: str) -> str:
        """What to send for `delta` (may be "" while a mark is held)."""
        text, self.held = self.held + delta, ""
        if self.active and "[" in text:
            text, self.held = draft_text(self.chat_id, self.person, text)
        return text

    def flush(self) -> str:
        """What was held: the text ended (or a tool step began), so it is no mark."""
        held, self.held = self.held, ""
        return held
