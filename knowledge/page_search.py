"""Search within one collection on its page, with the hub's search syntax
(chats.search_query): words and "phrases" rank passages through the hybrid search
(knowledge.selectors.search_for_person, so only a collection the person may read);
`-word` / `NOT word` drop passages that contain it, a "quoted phrase" must appear as written,
and `after:` / `before:` keep documents changed on a later / earlier day. The chat filters
(`from:`, `in:`, `channel:`, `has:`, `type:`) have no meaning for documents and are refused
with a sentence saying so.
"""

from dataclasses import dataclass

from chats.search_query import SearchQueryError, parse_search_query
from knowledge.models import Collection, Passage
from knowledge.selectors import search_for_person

MAX_RESULTS = 20
# Hybrid hits fetched before the syntax's exclusions narrow them.
FETCH = 60


class PageSearchError(ValueError):
    """A query the page cannot search; str() says why, for the person."""


@dataclass(frozen=True)
class Result:
    passage: Passage
    snippet: str


def _snippet(text: str, terms: list[str], width: int = 240) -> str:
    folded = text.casefold()
    at = min((i for t in terms if (i := folded.find(t.casefold())) >= 0), default=0)
    start = max(0, at - width // 3)
    piece = text[start : start + width].strip()
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


def search_collection(person, collection: Collection, query: str) -> list[Result]:
    """The passages of `collection` that answer `query` for `person` (none for anyone who
    may not read it), best first."""
    try:
        parsed = parse_search_query(query)
    except SearchQueryError as exc:
        raise PageSearchError(str(exc)) from exc
    if parsed.authors or parsed.chats or parsed.channels or parsed.extra:
        raise PageSearchError(
            "from:, in:, channel:, has: and type: narrow chat messages; a collection's "
            'documents have none of them. Search with words, "phrases", -word, after: '
            "and before:."
        )
    words = [term.text for clause in parsed.clauses for term in clause]
    if not words:
        raise PageSearchError("Give at least one word to search for.")
    passages = search_for_person(person, " ".join(words), collection=collection, limit=FETCH)
    excluded = [term.text.casefold() for term in parsed.excluded]
    phrases = [w.casefold() for w in words if " " in w]
    results = []
    for passage in passages:
        text = f"{passage.section}\n{passage.text}".casefold()
        if any(word in text for word in excluded):
            continue
        if any(phrase not in text for phrase in phrases):
            continue
        changed = passage.document.updated_at
        if parsed.after and changed < parsed.after:
            continue
        if parsed.before and changed >= parsed.before:
            continue
        results.append(Result(passage, _snippet(passage.text, words)))
        if len(results) == MAX_RESULTS:
            break
    return results
