"""Citations of team knowledge in the agent's replies (docs/KNOWLEDGE.md#citations).

The `knowledge_search` tool gives each passage a reference `[K<passage id>]`, and the model
cites the passages it used with it. When the reply is stored (a reply-stored hook), every
reference to a passage of a collection that may be used in that chat becomes a `Citation`
row that keeps the document, section and content hash as they were; a reference to anything
else (a made-up id, a passage of a collection not usable there) is kept as nobody's.

How a citation shows depends on who reads it, and never points at a passage the reader may
not open:

- on the dashboard (a body renderer of chats.extras), for a reader of the collection, a link
  to the document viewer at the passage (`/knowledge/<collection>/doc/<id>#K<passage>`)
  saying document § section; for anyone else "[citation hidden]";
- on Telegram (an outbound text filter), "document § section" where the chat may use the
  collection (knowledge.access.chat_may_use), "[citation hidden]" elsewhere;
- in the HTTP API and /v1 (a text renderer, and a draft renderer for streamed replies), for
  the token's person: "[document § section]" for a reader (a Markdown link to the viewer in
  the API), "[citation hidden]" for anyone else;
- "changed since" follows a citation whose document changed after the reply: another
  content hash, or removed.

The stored text always keeps its `[K<id>]` references.
"""

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from chats.markdown import render_markdown
from chats.models import Chat, Message
from knowledge.access import chat_may_use, collections_for_turn, collections_readable_by
from knowledge.models import Citation, Collection, Document, Passage, place_label

MARKER = re.compile(r"\[K(\d{1,18})\]")
# A reply cites at most this many distinct passages that become Citation rows.
MAX_CITATIONS = 50
HIDDEN = "[citation hidden]"
HIDDEN_PASSAGE = "a passage of a collection you may not read"
HIDDEN_RESULT = "(team knowledge search: not shown)"
TOOL_NAME = "knowledge_search"
CHANGED_HTML = mark_safe(' <span class="citation-changed label">changed since</span>')


def cited_ids(text: str) -> list[int]:
    """The distinct passage ids `text` cites, in order of first mention (bounded)."""
    seen: dict[int, None] = {}
    for match in MARKER.finditer(text or ""):
        seen.setdefault(int(match.group(1)), None)
        if len(seen) >= MAX_CITATIONS:
            break
    return list(seen)


def citations_record(turn, reply: Message | None) -> None:
    """The reply-stored hook: keep each passage the reply cites that the chat may use."""
    if reply is None or reply.role != Message.Role.ASSISTANT:
        return
    ids = cited_ids(reply.text)
    if not ids:
        return
    usable = {c.pk for c in collections_for_turn(reply.chat)}
    passages = Passage.objects.filter(pk__in=ids, collection_id__in=usable).select_related(
        "document"
    )
    Citation.objects.bulk_create(
        [
            Citation(
                message=reply,
                passage_id=p.pk,
                collection_id=p.collection_id,
                document=p.document,
                document_path=p.document.path,
                section=p.section,
                page=p.page,
                content_hash=p.document.content_hash,
            )
            for p in passages
        ],
        ignore_conflicts=True,
    )


@dataclass(frozen=True)
class Shown:
    """One citation as one reader sees it: a label and link, or hidden."""

    label: str = ""
    url: str = ""
    changed: bool = False

    @property
    def hidden(self) -> bool:
        return not self.label


def _label(citation: Citation) -> str:
    return place_label(citation.document_path, citation.section, citation.page)


def _changed(citation: Citation, current: dict[int, str]) -> bool:
    if citation.document_id is None or citation.document_id not in current:
        return True
    return current[citation.document_id] != citation.content_hash


def viewer_url(citation: Citation) -> str:
    url = reverse("knowledge_document", args=[citation.collection_id, citation.document_id])
    return f"{url}#K{citation.passage_id}"


def _by_message(messages: Sequence[Message]) -> dict[int, dict[int, Citation]]:
    rows = Citation.objects.filter(message__in=[m.pk for m in messages])
    found: dict[int, dict[int, Citation]] = {}
    for row in rows:
        found.setdefault(row.message_id, {})[row.passage_id] = row
    return found


def _current_hashes(citations) -> dict[int, str]:
    ids = {c.document_id for c in citations if c.document_id}
    return dict(Document.objects.filter(pk__in=ids).values_list("pk", "content_hash"))


def shown_for_person(messages: Sequence[Message], person) -> dict[int, dict[int, Shown]]:
    """`{message pk: {passage id: Shown}}` for `person`: a link only into collections they
    may read now; every other reference (unknown, or not theirs) hidden."""
    cited = _by_message(messages)
    everything = [c for per in cited.values() for c in per.values()]
    readable = set(
        collections_readable_by(person)
        .filter(pk__in={c.collection_id for c in everything})
        .values_list("pk", flat=True)
    )
    current = _current_hashes(everything)
    result: dict[int, dict[int, Shown]] = {}
    for message_pk, per in cited.items():
        for passage_id, citation in per.items():
            if citation.collection_id not in readable:
                continue
            changed = _changed(citation, current)
            url = viewer_url(citation) if citation.document_id is not None else ""
            result.setdefault(message_pk, {})[passage_id] = Shown(_label(citation), url, changed)
    return result


def _html_for(shown: Shown | None) -> str:
    if shown is None or shown.hidden:
        return format_html('<span class="citation citation-hidden">{}</span>', HIDDEN)
    changed = CHANGED_HTML if shown.changed else ""
    if not shown.url:
        return format_html('<span class="citation">[{}]</span>{}', shown.label, changed)
    return format_html('<a class="citation" href="{}">[{}]</a>{}', shown.url, shown.label, changed)


def _tool_results(messages: Sequence[Message]) -> list[tuple[Message, dict]]:
    found = []
    for message in messages:
        if message.role != Message.Role.TOOL:
            continue
        if (message.metadata or {}).get("tool_name") != TOOL_NAME:
            continue
        try:
            result = json.loads(message.text)
        except ValueError:
            result = None
        found.append((message, result if isinstance(result, dict) else {}))
    return found


def _tool_results_text(messages: Sequence[Message], person) -> dict[int, str]:
    """`knowledge_search` results as `person` may read them: a passage of a collection they
    may not read (a reader removed since, a staff member who is no reader) is replaced by
    its reference. Results they may read whole are left out (shown as stored)."""
    results = _tool_results(messages)
    if not results:
        return {}
    readable = set(collections_readable_by(person).values_list("name", flat=True))
    texts = {}
    for message, result in results:
        passages = result.get("passages")
        if not isinstance(passages, list):
            if not result:  # not the tool's JSON: nothing to tell what it holds
                texts[message.pk] = HIDDEN_RESULT
            continue
        if all(isinstance(p, dict) and p.get("collection") in readable for p in passages):
            continue
        shown = dict(result)
        shown["passages"] = [
            p
            if isinstance(p, dict) and p.get("collection") in readable
            else {"ref": p.get("ref") if isinstance(p, dict) else "", "hidden": HIDDEN_PASSAGE}
            for p in passages
        ]
        texts[message.pk] = json.dumps(shown, ensure_ascii=False)[:4000]
    return texts


def _tool_results_html(messages: Sequence[Message], person) -> dict[int, str]:
    """`_tool_results_text`, escaped for the dashboard."""
    return {pk: escape(text) for pk, text in _tool_results_text(messages, person).items()}


def citations_body_html(messages: Sequence[Message], person) -> dict[int, str]:
    """The chats.extras body renderer: replies with `[K<id>]` rendered for `person`, and
    `knowledge_search` results without the passages `person` may not read."""
    bodies = _tool_results_html(messages, person)
    citing = [m for m in messages if m.role == Message.Role.ASSISTANT and MARKER.search(m.text)]
    if not citing:
        return bodies
    shown = shown_for_person(citing, person)
    for message in citing:
        per = shown.get(message.pk, {})
        html = str(render_markdown(message.text))
        # The Markdown renderer escapes the text and leaves `[K12]` as it is; inside a link's
        # address it is percent-encoded, so only the text's own markers match here.
        bodies[message.pk] = MARKER.sub(
            lambda m, per=per: _html_for(per.get(int(m.group(1)))), html
        )
    return bodies


def citations_outbound_text(message: Message, text: str) -> str:
    """The chats.extras outbound filter (Telegram): `[K<id>]` becomes "(document § section)"
    where the chat may use the collection now, "[citation hidden]" anywhere else."""
    if message.role != Message.Role.ASSISTANT or not MARKER.search(text):
        return text
    per = {c.passage_id: c for c in Citation.objects.filter(message=message)}
    collections = {
        c.pk: c for c in Collection.objects.filter(pk__in={c.collection_id for c in per.values()})
    }
    allowed = {pk for pk, c in collections.items() if chat_may_use(message.chat, c)}
    current = _current_hashes(per.values())

    def replace(match: re.Match) -> str:
        citation = per.get(int(match.group(1)))
        if citation is None or citation.collection_id not in allowed:
            return HIDDEN
        note = ", changed since" if _changed(citation, current) else ""
        return f"({escape_markdown(_label(citation))}{note})"

    return MARKER.sub(replace, text)


def escape_markdown(text: str) -> str:
    """A label inside Markdown that Telegram's formatter renders: its own marks escaped."""
    return re.sub(r"([\\`*_\[\]])", r"\\\1", text)


# --- Plain text for one reader: the HTTP API's history and the OpenAI-compatible /v1 -------


def _text_for(shown: Shown | None, *, links: bool) -> str:
    if shown is None or shown.hidden:
        return HIDDEN
    label = escape_markdown(shown.label)
    changed = " (changed since)" if shown.changed else ""
    if links and shown.url:
        return f"[{label}]({shown.url}){changed}"
    return f"[{label}]{changed}"


def citations_text_for_person(
    messages: Sequence[Message], person, *, links: bool = False
) -> dict[int, str]:
    """The chats.extras text renderer (the HTTP API, /v1): the texts of `messages` that
    `person` reads otherwise than stored. In a reply, `[K<id>]` becomes "[document § section]"
    for a reader of the collection now (a Markdown link to the viewer with `links`, "changed
    since" when the document changed) and "[citation hidden]" for anyone else; a
    `knowledge_search` result loses the passages `person` may not read. The stored text
    keeps its references."""
    texts = _tool_results_text(messages, person)
    citing = [m for m in messages if m.role == Message.Role.ASSISTANT and MARKER.search(m.text)]
    if not citing:
        return texts
    shown = shown_for_person(citing, person)
    for message in citing:
        per = shown.get(message.pk, {})
        texts[message.pk] = MARKER.sub(
            lambda m, per=per: _text_for(per.get(int(m.group(1))), links=links), message.text
        )
    return texts


# A reference not finished yet at the end of a streamed piece: held until the next one.
_UNFINISHED = re.compile(r"\[(?:K\d{0,18})?$")


def citations_draft_text(chat_id: int, person, text: str) -> tuple[str, str]:
    """The chats.extras draft renderer (a reply being streamed, before its citations are
    stored): `text` with each complete `[K<id>]` as `person` reads it, and the unfinished
    reference at its end held back. A passage shows as "[document § section]" only when its
    collection may be used in the chat now (what `citations_record` will keep) and `person`
    may read it; anything else is "[citation hidden]"."""

    def readable(usable: set[int]) -> set[int]:
        return set(
            collections_readable_by(person).filter(pk__in=usable).values_list("pk", flat=True)
        )

    return _draft(chat_id, text, readable, "[{}]")


def citations_outbound_draft(chat_id: int, text: str) -> str:
    """The chats.extras outbound draft filter (Telegram's previews of a reply being
    streamed): as `citations_outbound_text` will send it, "(document § section)" where the
    chat may use the collection now, "[citation hidden]" anywhere else; the unfinished
    reference at the end left out."""
    return _draft(chat_id, text, lambda usable: usable, "({})")[0]


def _draft(chat_id: int, text: str, readable, shape: str) -> tuple[str, str]:
    held = ""
    if unfinished := _UNFINISHED.search(text):
        text, held = text[: unfinished.start()], unfinished.group(0)
    ids = {int(m.group(1)) for m in MARKER.finditer(text)}
    if not ids:
        return text, held
    chat = Chat.objects.filter(pk=chat_id).first()
    usable = {c.pk for c in collections_for_turn(chat)} if chat is not None else set()
    allowed = readable(usable) if usable else set()
    passages = {
        p.pk: p
        for p in Passage.objects.filter(pk__in=ids, collection_id__in=allowed).select_related(
            "document"
        )
    }

    def replace(match: re.Match) -> str:
        passage = passages.get(int(match.group(1)))
        if passage is None:
            return HIDDEN
        label = place_label(passage.document.path, passage.section, passage.page)
        return shape.format(escape_markdown(label))

    return MARKER.sub(replace, text), held
