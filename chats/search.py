"""Full-text search over message history, never outside the chats a person may read.

The query syntax (`chats.search_query`): words, "phrases", OR, -word / NOT word, prefix*,
and from: in: channel: before: after: filters. A word or phrase matches as a
case-insensitive substring, so Chinese needs no word segmentation ("记忆" finds
"长期记忆管理") and "deploy" finds "Deployment"; `dep*` matches where a word starts.
Everything the syntax does not claim (`%`, `_`, `(`, `NEAR(`, backslashes) is literal.

Indexes (migration 0002): on SQLite an FTS5 trigram table over chats_message.text, on
PostgreSQL a pg_trgm GIN index. Trigrams need terms of at least three characters; shorter
terms filter the trigram candidates, and a query without a 3-character term walks the
readable history newest first until it has enough hits (see bench/search_bench.py). On
PostgreSQL, whether to walk or to take the index's candidates is decided per query from
the index's own count (`chats.search_postgresql`), not from the planner's estimates.

Cheap misses: before building the scoped query, one tiny query asks the index whether the
required words exist anywhere at all; a word that exists nowhere answers at once. It reads
the live index, so a message stored a moment ago is never a miss. (On PostgreSQL the
candidate count is that query; 2-character words ask the pair indexes of migrations 0010
and 0012.)
"""

import itertools
import re
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL

from chats.models import Actor, Chat, Message
from chats.search_postgresql import clause_is_indexable, postgresql_hits, regex_literal
from chats.search_query import (
    MAX_TERMS,
    SearchQuery,
    SearchQueryError,
    Term,
    parse_search_query,
    registered_filter,
)
from chats.search_sources import (
    MatchedIn,
    SourceSnippet,
    search_text_sources,
    searches_sources,
    source_hits,
    source_snippets,
)
from chats.selectors import chats_readable_by

__all__ = [
    "MAX_TERMS",
    "SearchHit",
    "SearchQueryError",
    "build_snippet",
    "chat_message_search",
    "message_search",
    "parse_search_query",
]

MAX_RESULTS = 200
TRIGRAM = 3
CJK_FIRST = 0x2E80  # CJK radicals onwards: the characters migration 0010 indexes in pairs
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
    # Where the words were found when not in the message's own text: a file on it (search
    # text sources, `chats.search_sources`); the snippet is then from that file's text.
    matched_in: MatchedIn | None = None


def message_search(
    *,
    person: AbstractBaseUser | None,
    query: str,
    chat: Chat | None = None,
    limit: int = 20,
) -> list[SearchHit]:
    """Messages matching `query`, newest first, from chats `person` may read.

    With `chat`, only that chat (nothing when `person` may not read it). Markers and system
    messages are never returned. Raises SearchQueryError for a query it cannot read.
    """
    parsed = parse_search_query(query)
    limit = min(limit, MAX_RESULTS)
    if parsed.is_empty or limit <= 0:
        return []

    def scope() -> tuple[str, list] | None:
        readable = chats_readable_by(person).order_by().values("id")
        try:
            readable_sql, readable_params = readable.query.sql_with_params()
        except EmptyResultSet:
            return None
        # On PostgreSQL the readable chats become one array, computed once: a walk down
        # the history then skips other chats' messages before testing their text.
        in_readable = "= ANY(ARRAY({}))" if connection.vendor == "postgresql" else "IN ({})"
        scope_sql = "m.chat_id " + in_readable.format(readable_sql)
        scope_params = list(readable_params)
        if chat is not None:
            scope_sql += " AND m.chat_id = %s"
            scope_params.append(chat.pk)
        return scope_sql, scope_params

    return _search(parsed, scope, limit)


def chat_message_search(*, chat: Chat, query: str, limit: int = 20) -> list[SearchHit]:
    """Like `message_search`, within one chat, without a Person: for the agent answering in
    that chat (a group's members may not be linked to Persons). The caller owns the scope."""
    parsed = parse_search_query(query)
    limit = min(limit, MAX_RESULTS)
    if parsed.is_empty or limit <= 0:
        return []
    return _search(parsed, lambda: ("m.chat_id = %s", [chat.pk]), limit)


def _search(parsed: SearchQuery, base_scope, limit: int) -> list:
    """`base_scope()`: the SQL condition on `m` for the chats searched (None: no chat),
    built only when needed: on PostgreSQL a miss is known before. The messages' own text
    first, then the search text sources (files' text) for what it did not find."""
    in_sources = searches_sources(parsed)
    text_missing = _surely_missing(parsed)
    if text_missing and not in_sources:
        return []

    def scope() -> tuple[str, list] | None:
        base = base_scope()
        if base is None:
            return None
        filters_sql, filters_params = _filters_sql(parsed)
        if connection.vendor == "postgresql":  # (SQLite's queries test roles themselves)
            roles_sql, roles_params = _roles_sql()
            filters_sql, filters_params = (
                [*filters_sql, roles_sql],
                [*filters_params, *roles_params],
            )
        return " AND ".join([base[0], *filters_sql]), [*base[1], *filters_params]

    def load(ids) -> list[Message]:
        """The messages of `ids` (a list, or SQL that yields them) with chat and author."""
        if isinstance(ids, list) and not ids:
            return []
        found = Message.objects.filter(id__in=ids).select_related("actor", "chat")
        return list(found.order_by("-id"))

    if text_missing:
        messages = []
    elif connection.vendor == "sqlite":
        where = scope()
        if where is None:
            return []
        messages = load(RawSQL(*_sqlite_hit_ids(parsed, *where, limit)))
    elif connection.vendor == "postgresql":
        messages = postgresql_hits(parsed, scope, limit, load)
    else:
        raise NotImplementedError(
            f"message search supports SQLite and PostgreSQL, not {connection.vendor}"
        )
    terms = parsed.highlight_terms
    hits = [_hit(message, terms) for message in messages]
    if in_sources:
        hits = _with_source_hits(hits, parsed, base_scope, limit)
    return hits


# --- Text beside messages (files) -------------------------------------------------------


def _with_source_hits(hits: list[SearchHit], parsed: SearchQuery, base_scope, limit: int):
    """`hits` and the messages whose files (search text sources) hold the query, newest
    first, `limit` in all. A message whose own text matched is a hit of its text."""
    base = base_scope()
    if base is None:
        return hits
    filters_sql, filters_params = _filters_sql(parsed)
    roles_sql, roles_params = _roles_sql()
    where = (
        " AND ".join([base[0], *filters_sql, roles_sql]),
        [*base[1], *filters_params, *roles_params],
    )
    excluded = _message_excluded_sql(parsed)
    found = {hit.message.pk for hit in hits}
    rows: dict[int, tuple] = {}  # message id -> (source, row id): its newest matching row
    # With `limit` hits from the text, only files of newer messages can be among the newest.
    newer_than = min(found) if len(found) >= limit else None
    for source in search_text_sources():
        for row_id, message_id in source_hits(
            source, parsed, where, excluded, limit, newer_than=newer_than
        ):
            if message_id not in found and message_id not in rows:
                rows[message_id] = (source, row_id)
    newest = sorted([*found, *rows], reverse=True)[:limit]
    wanted = [message_id for message_id in newest if message_id in rows]
    if not wanted:
        return hits
    messages = Message.objects.filter(id__in=wanted).select_related("actor", "chat")
    messages = {message.pk: message for message in messages}
    terms = parsed.highlight_terms
    snippets: dict[tuple[str, int], SourceSnippet] = {}
    for source in search_text_sources():
        row_ids = [rows[m][1] for m in wanted if rows[m][0].name == source.name]
        # Every hit holds a term of the first indexed clause: look for those.
        first = next(c for c in parsed.clauses if clause_is_indexable(c))
        for row_id, snippet in source_snippets(
            source, row_ids, [term.text for term in first]
        ).items():
            snippets[(source.name, row_id)] = snippet
    by_id = {hit.message.pk: hit for hit in hits}
    for message_id in wanted:
        source, row_id = rows[message_id]
        snippet = snippets.get((source.name, row_id))
        if message_id in messages and snippet is not None:
            by_id[message_id] = _source_hit(messages[message_id], snippet, terms)
    return [by_id[message_id] for message_id in newest if message_id in by_id]


def _source_hit(message: Message, found: SourceSnippet, terms: list[str]) -> SearchHit:
    snippet, highlights = build_snippet(found.text, terms)
    if found.cut_before and not snippet.startswith(ELLIPSIS):
        snippet = ELLIPSIS + snippet
        highlights = [(start + 1, end + 1) for start, end in highlights]
    if found.cut_after and not snippet.endswith(ELLIPSIS):
        snippet += ELLIPSIS
    return SearchHit(
        message=message, snippet=snippet, highlights=highlights, matched_in=found.matched_in
    )


def _message_excluded_sql(parsed: SearchQuery) -> tuple[str, list]:
    """A condition on `m`: its own text holds none of the excluded words (a file's hit is
    refused by a word excluded from its message too)."""
    pieces, params = ["1 = 1"], []
    for term in parsed.excluded:
        if connection.vendor == "sqlite":
            piece, piece_params = _sqlite_term_sql(term)
        else:
            piece, piece_params = "m.text ILIKE %s", [_like_contains(term.text)]
            if term.prefix:
                piece += " AND m.text ~* %s"
                piece_params.append(r"(^|\W)" + regex_literal(term.text))
        pieces.append(f"NOT ({piece})")
        params += piece_params
    return " AND ".join(pieces), params


# --- Cheap misses -----------------------------------------------------------------------


def _surely_missing(parsed: SearchQuery) -> bool:
    """Whether a required clause matches no message at all, asked of the indexes alone.

    Clauses of 3+ character words ask the trigram index; a 2-character Chinese word asks
    the index of migration 0010, a pair of ASCII letters or digits on PostgreSQL the pair
    table of migration 0012. They look at the whole table (any chat, any role): a
    superset of what the scoped query could find, so "missing" here is always right, and
    they read the indexes as they are now. Other clauses are left to the real query."""
    long_clauses = [c for c in parsed.clauses if all(len(t.text) >= TRIGRAM for t in c)]
    pair_clauses = [
        c
        for c in parsed.clauses
        if c not in long_clauses and all(len(t.text) >= TRIGRAM or _is_known_pair(t) for t in c)
    ]
    if connection.vendor == "postgresql" and any(map(clause_is_indexable, parsed.clauses)):
        # The trigram probe (chats.search_postgresql) answers for these, in the same
        # lookup that finds the hits.
        long_clauses = []
    if not (long_clauses or pair_clauses) or connection.vendor not in ("sqlite", "postgresql"):
        return False
    checks, params = [], []
    if long_clauses:
        check, check_params = _exists_long(long_clauses)
        checks.append(check)
        params += check_params
    for clause in pair_clauses:
        pieces = []
        for term in clause:
            piece, piece_params = (
                _exists_long([[term]]) if len(term.text) >= TRIGRAM else _exists_pair(term.text)
            )
            pieces.append(piece)
            params += piece_params
        checks.append("(" + " OR ".join(pieces) + ")")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {' AND '.join(checks)}", params)
        return not cursor.fetchone()[0]


def _is_known_pair(term: Term) -> bool:
    """A 2-character term the pair indexes can answer: Chinese on both databases; ASCII
    on SQLite (its trigram index holds every pair followed by something), ASCII letters
    and digits on PostgreSQL (migration 0012)."""
    if len(term.text) != 2:
        return False
    if all(ord(ch) >= CJK_FIRST for ch in term.text):
        return True
    if connection.vendor == "sqlite":
        return term.text.isascii()
    return _is_ascii_word_pair(term.text)


def _is_ascii_word_pair(text: str) -> bool:
    return text.isascii() and text.isalnum()


def _exists_long(clauses: list[list[Term]]) -> tuple[str, list]:
    if connection.vendor == "sqlite":
        return (
            "EXISTS (SELECT 1 FROM chats_message_fts WHERE chats_message_fts MATCH %s)",
            [_fts5_and(clauses)],
        )
    checks, params = [], []
    for clause in clauses:
        checks.append("(" + " OR ".join(["text ILIKE %s"] * len(clause)) + ")")
        params += [_like_contains(term.text) for term in clause]
    return f"EXISTS (SELECT 1 FROM chats_message WHERE {' AND '.join(checks)})", params


def _exists_pair(pair: str) -> tuple[str, list]:
    if connection.vendor == "sqlite":
        # A trigram starting with the pair (the index folds ASCII case), or a text ending
        # with it in any case.
        folded = pair.lower()
        spellings = sorted(
            {"".join(s) for s in itertools.product(*({c.lower(), c.upper()} for c in pair))}
        )
        return (
            "(EXISTS (SELECT 1 FROM chats_message_fts_vocab WHERE term >= %s AND term < %s)"
            " OR EXISTS (SELECT 1 FROM chats_message WHERE substr(text, -2) IN ("
            + ", ".join(["%s"] * len(spellings))
            + ")))",
            [folded, folded + "\U0010ffff", *spellings],
        )
    if _is_ascii_word_pair(pair):
        return "EXISTS (SELECT 1 FROM chats_search_pair WHERE pair = %s)", [pair.lower()]
    return (
        "EXISTS (SELECT 1 FROM chats_message WHERE chats_cjk_bigrams(text) @> ARRAY[%s]::text[])",
        [pair],
    )


# --- SQL --------------------------------------------------------------------------------


def _subquery(queryset) -> tuple[str, list]:
    try:
        sql, params = queryset.order_by().values("id").query.sql_with_params()
    except EmptyResultSet:
        return "SELECT NULL WHERE 1 = 0", []
    return sql, list(params)


def _filters_sql(parsed: SearchQuery) -> tuple[list[str], list]:
    """from:, in:, channel:, before:, after: and the registered filters as conditions on `m`."""
    sql: list[str] = []
    params: list = []
    if parsed.authors:
        who = Q()
        for name in parsed.authors:
            who |= Q(display_name__icontains=name) | Q(person__username__iexact=name)
        sub_sql, sub_params = _subquery(Actor.objects.filter(who))
        sql.append(f"m.actor_id IN ({sub_sql})")
        params += sub_params
    if parsed.chats or parsed.channels:
        where = Q()
        if parsed.chats:
            titles = Q()
            for name in parsed.chats:
                titles |= Q(title__icontains=name) | Q(chat_key__iexact=name)
            where &= titles
        if parsed.channels:
            where &= Q(channel__in=parsed.channels)
        sub_sql, sub_params = _subquery(Chat.objects.filter(where))
        sql.append(f"m.chat_id IN ({sub_sql})")
        params += sub_params
    if parsed.after is not None:
        sql.append("m.created_at >= %s")
        params.append(connection.ops.adapt_datetimefield_value(parsed.after))
    if parsed.before is not None:
        sql.append("m.created_at < %s")
        params.append(connection.ops.adapt_datetimefield_value(parsed.before))
    for name, values in parsed.extra.items():
        condition_sql, condition_params = registered_filter(name).condition(values)
        sql.append(condition_sql)
        params += condition_params
    return sql, params


def _roles_sql() -> tuple[str, list[str]]:
    placeholders = ", ".join(["%s"] * len(SEARCHABLE_ROLES))
    return f"m.role IN ({placeholders})", [str(role) for role in SEARCHABLE_ROLES]


def _fts5_phrase(text: str) -> str:
    """Text as an FTS5 string: inside double quotes everything is literal but `"`."""
    return '"' + text.replace('"', '""') + '"'


def _fts5_and(clauses: list[list[Term]]) -> str:
    return " AND ".join(
        "(" + " OR ".join(_fts5_phrase(term.text) for term in clause) + ")" for clause in clauses
    )


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


def _word_start_regex(term: Term) -> str:
    """Python regex (SQLite's REGEXP is Python's re) for `term` at the start of a word."""
    return r"(?i)(?:^|\W)" + re.escape(term.text)


def _sqlite_term_sql(term: Term) -> tuple[str, list]:
    """An exact test of one term against `m.text`."""
    if term.prefix:
        return "m.text REGEXP %s", [_word_start_regex(term)]
    if len(term.text) >= TRIGRAM:
        return (
            "m.id IN (SELECT rowid FROM chats_message_fts WHERE chats_message_fts MATCH %s)",
            [_fts5_phrase(term.text)],
        )
    variants = _non_ascii_case_variants(term.text)
    return (
        "(" + " OR ".join([r"m.text LIKE %s ESCAPE '\'"] * len(variants)) + ")",
        [_like_contains(variant) for variant in variants],
    )


def _any_of(terms: list[Term], term_sql) -> tuple[str, list]:
    pieces, params = [], []
    for term in terms:
        piece, piece_params = term_sql(term)
        pieces.append(piece)
        params += piece_params
    return "(" + " OR ".join(pieces) + ")", params


def _sqlite_hit_ids(
    parsed: SearchQuery, scope_sql: str, scope_params: list, limit: int
) -> tuple[str, list]:
    # Clauses of 3+ character terms go to the trigram index; a prefix term's letters find
    # candidates there and REGEXP then checks that a word starts with them.
    indexed = [c for c in parsed.clauses if all(len(t.text) >= TRIGRAM for t in c)]
    roles_sql, roles_params = _roles_sql()
    filters, filter_params = [roles_sql], list(roles_params)
    for clause in parsed.clauses:
        if clause in indexed and not any(term.prefix for term in clause):
            continue
        piece, piece_params = _any_of(clause, _sqlite_term_sql)
        filters.append(piece)
        filter_params += piece_params
    excluded_in_match = [t for t in parsed.excluded if len(t.text) >= TRIGRAM and not t.prefix]
    for term in parsed.excluded:
        if indexed and term in excluded_in_match:
            continue
        piece, piece_params = _sqlite_term_sql(term)
        filters.append(f"NOT {piece}")
        filter_params += piece_params
    filters_sql = " AND ".join(filters)

    if indexed:
        # The trigram index yields matching ids newest first (FTS5 consumes the ORDER BY)
        # and CROSS JOIN keeps it the outer loop, so the LIMIT stops the scan early.
        match = _fts5_and(indexed)
        if excluded_in_match:
            match = (
                f"({match}) NOT ({' OR '.join(_fts5_phrase(t.text) for t in excluded_in_match)})"
            )
        sql = (
            "SELECT m.id FROM chats_message_fts"
            " CROSS JOIN chats_message m ON m.id = chats_message_fts.rowid"
            f" WHERE chats_message_fts MATCH %s AND {scope_sql} AND {filters_sql}"
            " ORDER BY chats_message_fts.rowid DESC LIMIT %s"
        )
        return sql, [match, *scope_params, *filter_params, limit]

    # No 3-character term: no trigram to look up. The unary `+` stops SQLite from using the
    # chat_id index (and sorting everything it finds): it walks ids newest first and stops
    # after `limit` hits. A single `chat` still uses (chat_id, id).
    sql = (
        f"SELECT m.id FROM chats_message m WHERE +{scope_sql} AND {filters_sql}"
        " ORDER BY m.id DESC LIMIT %s"
    )
    return sql, [*scope_params, *filter_params, limit]


def _like_contains(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


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
