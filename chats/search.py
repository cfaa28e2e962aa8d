"""Full-text search over message history, never outside the chats a person may read.

A query is split on whitespace into terms; a message matches when it contains every term
as a case-insensitive substring, so Chinese needs no word segmentation ("记忆" finds
"长期记忆管理") and "deploy" finds "Deployment". Query text is always literal: quotes,
`*`, `OR`, `NEAR(`, `%`, `_` and backslashes are searched for, never interpreted.

Indexes (migration 0002): on SQLite an FTS5 trigram table over chats_message.text, on
PostgreSQL a pg_trgm GIN index. Trigrams need terms of at least three characters; shorter
terms filter the trigram candidates, and a query of only short terms walks the readable
history newest first until it has enough hits (see bench/search_bench.py for timings).
"""

import itertools
import re
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models.expressions import RawSQL

from chats.models import Chat, Message
from chats.selectors import chats_readable_by

MAX_TERMS = 8
MAX_RESULTS = 200
TRIGRAM = 3
SNIPPET_CHARS = 160
SNIPPET_CONTEXT_BEFORE = 50
SNIPPET_WORD_SNAP = 20
ELLIPSIS = "…"

# Markers (resets and the like) carry no conversation text; system prompts are not history
# a person wrote or read.
SEARCHABLE_ROLES = (
    Message.Role.USER,
    Message.Role.ASSISTANT,
    Message.Role.SUMMARY,
    Message.Role.TOOL,
)


@dataclass(frozen=True)
class SearchHit:
    """One matching message with a plain-text snippet and the matched spans inside it."""

    message: Message
    snippet: str
    highlights: list[tuple[int, int]]


def search_terms(query: str) -> list[str]:
    """The distinct terms of `query` (case-insensitive), in order, at most MAX_TERMS."""
    # NUL and lone surrogates cannot be sent to the database: treat them as separators.
    cleaned = "".join(" " if ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in query)
    terms: list[str] = []
    seen: set[str] = set()
    for term in cleaned.split():
        key = term.casefold()
        if key not in seen:
            seen.add(key)
            terms.append(term)
        if len(terms) == MAX_TERMS:
            break
    return terms


def message_search(
    *,
    person: AbstractBaseUser | None,
    query: str,
    chat: Chat | None = None,
    limit: int = 20,
) -> list[SearchHit]:
    """Messages containing every term of `query`, newest first, from chats `person` may read.

    With `chat`, only that chat (nothing when `person` may not read it). Markers and system
    messages are never returned. One database query; the chat and actor come with it.
    """
    terms = search_terms(query)
    limit = min(limit, MAX_RESULTS)
    if not terms or limit <= 0:
        return []
    readable = chats_readable_by(person).order_by().values("id")
    try:
        readable_sql, readable_params = readable.query.sql_with_params()
    except EmptyResultSet:
        return []
    scope_sql = f"m.chat_id IN ({readable_sql})"
    scope_params = list(readable_params)
    if chat is not None:
        scope_sql += " AND m.chat_id = %s"
        scope_params.append(chat.pk)
    return _search(terms, scope_sql, scope_params, limit)


def chat_message_search(*, chat: Chat, query: str, limit: int = 20) -> list[SearchHit]:
    """Like `message_search`, within one chat, without a Person: for the agent answering in
    that chat (a group's members may not be linked to Persons). The caller owns the scope."""
    terms = search_terms(query)
    limit = min(limit, MAX_RESULTS)
    if not terms or limit <= 0:
        return []
    return _search(terms, "m.chat_id = %s", [chat.pk], limit)


def _search(terms: list[str], scope_sql: str, scope_params: list, limit: int) -> list[SearchHit]:
    if connection.vendor == "sqlite":
        ids_sql, ids_params = _sqlite_hit_ids(terms, scope_sql, scope_params, limit)
    elif connection.vendor == "postgresql":
        ids_sql, ids_params = _postgresql_hit_ids(terms, scope_sql, scope_params, limit)
    else:
        raise NotImplementedError(
            f"message search supports SQLite and PostgreSQL, not {connection.vendor}"
        )

    messages = (
        Message.objects.filter(id__in=RawSQL(ids_sql, ids_params))
        .select_related("actor", "chat")
        .order_by("-id")
    )
    return [_hit(message, terms) for message in messages]


# --- SQL --------------------------------------------------------------------------------


def _roles_sql() -> tuple[str, list[str]]:
    placeholders = ", ".join(["%s"] * len(SEARCHABLE_ROLES))
    return f"m.role IN ({placeholders})", [str(role) for role in SEARCHABLE_ROLES]


def _fts5_phrase(term: str) -> str:
    """A term as an FTS5 string: inside double quotes everything is literal but `"`."""
    return '"' + term.replace('"', '""') + '"'


def _non_ascii_case_variants(term: str) -> list[str]:
    """The spellings of a short term with each non-ASCII letter in lower or upper case.

    SQLite's LIKE ignores case for ASCII only; trying the few variants of a 1-2 character
    term ignores case in every script, as the trigram index and PostgreSQL do.
    """
    choices = []
    for ch in term:
        forms = {ch}
        if not ch.isascii():
            forms |= {form for form in (ch.lower(), ch.upper()) if len(form) == 1}
        choices.append(sorted(forms))
    return ["".join(combination) for combination in itertools.product(*choices)]


def _sqlite_hit_ids(
    terms: list[str], scope_sql: str, scope_params: list, limit: int
) -> tuple[str, list]:
    long_terms = [term for term in terms if len(term) >= TRIGRAM]
    short_terms = [term for term in terms if len(term) < TRIGRAM]
    roles_sql, roles_params = _roles_sql()
    filters, filter_params = [roles_sql], list(roles_params)
    for term in short_terms:
        variants = _non_ascii_case_variants(term)
        filters.append("(" + " OR ".join([r"m.text LIKE %s ESCAPE '\'"] * len(variants)) + ")")
        filter_params += [_like_contains(variant) for variant in variants]
    filters_sql = " AND ".join(filters)

    if long_terms:
        # The trigram index yields matching ids newest first (FTS5 consumes the ORDER BY)
        # and CROSS JOIN keeps it the outer loop, so the LIMIT stops the scan early.
        match = " ".join(_fts5_phrase(term) for term in long_terms)
        sql = (
            "SELECT m.id FROM chats_message_fts"
            " CROSS JOIN chats_message m ON m.id = chats_message_fts.rowid"
            f" WHERE chats_message_fts MATCH %s AND {scope_sql} AND {filters_sql}"
            " ORDER BY chats_message_fts.rowid DESC LIMIT %s"
        )
        return sql, [match, *scope_params, *filter_params, limit]

    # Only 1-2 character terms: no trigram to look up. The unary `+` stops SQLite from
    # using the chat_id index (and sorting everything it finds): it walks ids newest
    # first and stops after `limit` hits. A single `chat` still uses (chat_id, id).
    sql = (
        f"SELECT m.id FROM chats_message m WHERE +{scope_sql} AND {filters_sql}"
        " ORDER BY m.id DESC LIMIT %s"
    )
    return sql, [*scope_params, *filter_params, limit]


def _like_contains(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _postgresql_hit_ids(
    terms: list[str], scope_sql: str, scope_params: list, limit: int
) -> tuple[str, list]:
    roles_sql, roles_params = _roles_sql()
    filters, filter_params = [], []
    for term in terms:
        # Both operators can use the gin_trgm_ops index on text; LIKE is much cheaper per
        # row for text without letter case (Chinese), where it means the same thing.
        operator = "ILIKE" if term.lower() != term.upper() else "LIKE"
        filters.append(f"m.text {operator} %s")
        filter_params.append(_like_contains(term))
    sql = (
        f"SELECT m.id FROM chats_message m WHERE {scope_sql} AND {roles_sql}"
        f" AND {' AND '.join(filters)} ORDER BY m.id DESC LIMIT %s"
    )
    return sql, [*scope_params, *roles_params, *filter_params, limit]


# --- Snippets ---------------------------------------------------------------------------


def _hit(message: Message, terms: list[str]) -> SearchHit:
    snippet, highlights = build_snippet(message.text, terms)
    return SearchHit(message=message, snippet=snippet, highlights=highlights)


def build_snippet(text: str, terms: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """~SNIPPET_CHARS of `text` (whitespace collapsed) around the first match of any term,
    with ELLIPSIS where cut, and the merged (start, end) spans of every term inside it."""
    flat = " ".join(text.split())
    patterns = [re.compile(re.escape(term), re.IGNORECASE) for term in terms]
    first_matches = [m for m in (pattern.search(flat) for pattern in patterns) if m]
    if first_matches:
        first = min(first_matches, key=lambda m: (m.start(), -m.end()))
        match_start, match_end = first.start(), first.end()
    else:
        match_start = match_end = 0
    width = max(SNIPPET_CHARS, match_end - match_start)
    before = min(SNIPPET_CONTEXT_BEFORE, width - (match_end - match_start))
    start = max(0, match_start - before)
    end = min(len(flat), start + width)
    start = max(0, end - width)
    # Prefer cutting at a space near the edge, so English words are not chopped.
    if start > 0:
        space = flat.find(" ", start, min(match_start, start + SNIPPET_WORD_SNAP))
        if space != -1:
            start = space + 1
    if end < len(flat):
        space = flat.rfind(" ", max(match_end, end - SNIPPET_WORD_SNAP), end)
        if space != -1:
            end = space
    prefix = ELLIPSIS if start > 0 else ""
    suffix = ELLIPSIS if end < len(flat) else ""
    body = flat[start:end]
    spans = sorted(
        (m.start() + len(prefix), m.end() + len(prefix))
        for pattern in patterns
        for m in pattern.finditer(body)
    )
    highlights: list[tuple[int, int]] = []
    for span_start, span_end in spans:
        if highlights and span_start < highlights[-1][1]:
            highlights[-1] = (highlights[-1][0], max(highlights[-1][1], span_end))
        else:
            highlights.append((span_start, span_end))
    return prefix + body + suffix, highlights
