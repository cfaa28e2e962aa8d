"""The search page: messages of the chats a person can read, matches highlighted.

One template (`chats/search.html`); htmx requests from its form get the `results` partial,
and the form pushes `?q=` into the address bar so a search can be shared and reloaded.
"""

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

from chats.extras import message_texts, reader_snippet
from chats.models import Message
from chats.search import SearchHit, SearchQueryError, message_search
from chats.search_sources import MatchedIn

RESULT_LIMIT = 50
MAX_QUERY_CHARS = 500


@dataclass(frozen=True)
class SearchResult:
    """A hit as the page shows it: the message and its snippet as safe HTML."""

    message: Message
    snippet_html: SafeString
    matched_in: MatchedIn | None = None  # the file whose text matched, if not the message's


def highlighted_snippet(snippet: str, highlights: list[tuple[int, int]]) -> SafeString:
    """`snippet` escaped, with each (start, end) span wrapped in `<mark>`.

    Offsets index the plain snippet, so every piece is cut before it is escaped; spans that
    overlap, run backwards or fall outside the snippet are clamped rather than trusted.
    """
    pieces: list[str] = []
    position = 0
    for start, end in sorted(highlights):
        start = max(start, position)
        end = min(end, len(snippet))
        if start >= end:
            continue
        pieces.append(escape(snippet[position:start]))
        pieces.append(f"<mark>{escape(snippet[start:end])}</mark>")
        position = end
    pieces.append(escape(snippet[position:]))
    return mark_safe("".join(pieces))  # every piece of text went through escape()  # noqa: S308


def _result(hit: SearchHit, person, texts: dict[int, str]) -> SearchResult:
    """The hit as `person` reads it: its snippet follows the text other apps render for them
    (chats.extras: a knowledge passage they may not read is never shown)."""
    snippet, highlights = reader_snippet(hit, person, texts.get(hit.message.pk))
    return SearchResult(
        message=hit.message,
        snippet_html=highlighted_snippet(snippet, highlights),
        matched_in=hit.matched_in,
    )


def _results(hits: list[SearchHit], person) -> list[SearchResult]:
    texts = message_texts([hit.message for hit in hits], person)
    return [_result(hit, person, texts) for hit in hits]


@login_required
@require_GET
def search_page(request: HttpRequest) -> HttpResponse:
    """Matches of `?q=` in the chats the person can read, newest first; htmx gets `#results`."""
    query = request.GET.get("q", "").strip()[:MAX_QUERY_CHARS]
    hits, error = [], ""
    if query:
        try:
            hits = message_search(person=request.user, query=query, limit=RESULT_LIMIT)
        except SearchQueryError as exc:
            error = str(exc)
    context = {
        "query": query,
        "query_error": error,
        "results": _results(hits, request.user),
        "result_limit": RESULT_LIMIT,
        "agent_name": settings.AGENT_NAME,
    }
    # A history restore (back button after hx-push-url, cache miss) needs the whole page.
    partial = request.htmx and not request.htmx.history_restore_request
    template = "chats/search.html#results" if partial else "chats/search.html"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response
