"""Search text sources: text other apps keep beside messages, which a plain search term finds
too (attachments register their files' extracted text and descriptions; transcripts land in
the extracted text). `chats` never imports those apps: they register a `SearchTextSource` in
`AppConfig.ready()`, and `chats.search` asks every registered source after the messages' own
text.

A source is a table with one row per thing that holds derived text (a file), each row on one
message, and an index its app's migration makes: on SQLite an FTS5 table with the trigram
tokenizer over the text columns whose rowid is the row's id (`sqlite_fts_table`), on
PostgreSQL a pg_trgm GIN index on each text column.

What a source finds: a message in the searched scope (the same readers' rule, roles and
filters as the message search) one of whose rows holds every positive clause of the query in
its text, where neither that row nor the message's own text holds an excluded word. Words
are not mixed between the message's text and a row (a query whose words are split between
them finds neither). Bounds, so the message search keeps its speed:

- only queries with a clause the trigram index serves (every word of three characters or
  more) look inside sources: the index lists the candidates, never a walk through every
  file's text (shorter words are then tested on those candidates only);
- SQLite: the FTS5 index yields rows newest first and the LIMIT stops it (as the messages'
  index does); PostgreSQL: the newest WALK_ROWS rows in scope are tested first (common
  words end there), then the GIN index lists the older candidates, planned without the walk
  down the primary key (`chats.search_postgresql.without_walking`);
- when the messages' own text already gave `limit` hits, only files of newer messages can
  count: the index is read down to the first file of those, no further;
- a snippet reads a window of SNIPPET_WINDOW characters around the first match, found in
  the database, never the whole text (a file's text may be a million characters).
"""

import itertools
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import OperationalError, connection, transaction

from chats.search_postgresql import clause_is_indexable, regex_literal, without_walking
from chats.search_query import SearchQuery, Term

logger = logging.getLogger(__name__)

TRIGRAM = 3
WALK_ROWS = 50
INDEX_MS = "300"  # PostgreSQL: the index path's time bound, milliseconds
QUERY_CANCELED = "57014"
SNIPPET_BEFORE = 200
SNIPPET_WINDOW = 800


@dataclass(frozen=True)
class SearchTextSource:
    """A table of text beside messages that search reads (see the module's docstring)."""

    name: str  # the registering app's name for it: "attachments"
    noun: str  # what one row is, for people: "file"
    table: str
    message_column: str
    text_columns: tuple[str, ...]
    label_column: str  # what names a row for people (a file's name)
    sqlite_fts_table: str


@dataclass(frozen=True)
class MatchedIn:
    """Where a hit's words were found when not in the message's own text."""

    source: str  # the source's name: "attachments"
    noun: str  # "file"
    id: int  # the row's id (the attachment's)
    name: str  # the row's label (the file's name)


@dataclass(frozen=True)
class SourceSnippet:
    matched_in: MatchedIn
    text: str  # a window of the row's text around the first match
    cut_before: bool  # the window starts after the text's start
    cut_after: bool


_sources: dict[str, SearchTextSource] = {}


def register_search_text_source(source: SearchTextSource) -> None:
    """Make a plain search term also find `source`'s rows (idempotent by name)."""
    _sources[source.name] = source


def unregister_search_text_source(name: str) -> None:
    _sources.pop(name, None)


def search_text_sources() -> list[SearchTextSource]:
    return list(_sources.values())


def searches_sources(parsed: SearchQuery) -> bool:
    """Whether this query looks inside sources: some are registered and a clause is served
    by the trigram index (see the bounds above)."""
    return bool(_sources) and any(map(clause_is_indexable, parsed.clauses))


def source_hits(
    source: SearchTextSource,
    parsed: SearchQuery,
    where: tuple[str, list],
    message_excluded: tuple[str, list],
    limit: int,
    newer_than: int | None = None,
) -> list[tuple[int, int]]:
    """(row id, message id) of up to `limit` rows matching `parsed`, newest rows first, whose
    message satisfies `where` (a condition on `m`: scope, roles, filters) and
    `message_excluded` (a condition on `m` that its text holds no excluded word).

    `newer_than`: only rows of messages after this id (the message search already has
    `limit` hits down to it). Rows are written after their message, so no row older than the
    first row of such a message can qualify: the index is read only down to that row."""
    if newer_than is not None:
        # One indexed lookup ((message, id)): usually no row is that new and the index is
        # not read at all; else it is read from that row on (FTS5 takes a rowid range).
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT min(id) FROM {source.table} WHERE {source.message_column} > %s",
                [newer_than],
            )
            first = cursor.fetchone()[0]
        if first is None:
            return []
        row = f"{source.sqlite_fts_table}.rowid" if connection.vendor == "sqlite" else "s.id"
        where = (f"{where[0]} AND m.id > %s AND {row} >= %s", [*where[1], newer_than, first])
    if connection.vendor == "sqlite":
        return _sqlite_hits(source, parsed, where, message_excluded, limit)
    if connection.vendor == "postgresql":
        return _postgresql_hits(source, parsed, where, message_excluded, limit)
    raise NotImplementedError(f"search supports SQLite and PostgreSQL, not {connection.vendor}")


# --- SQLite -----------------------------------------------------------------------------


def _phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _like_contains(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _case_variants(text: str) -> list[str]:
    """The spellings of a short term with each non-ASCII letter in either case (SQLite's LIKE
    ignores case for ASCII only)."""
    choices = []
    for ch in text:
        forms = {ch}
        if not ch.isascii():
            forms |= {form for form in (ch.lower(), ch.upper()) if len(form) == 1}
        choices.append(sorted(forms))
    return ["".join(combination) for combination in itertools.product(*choices)]


def _sqlite_term(source: SearchTextSource, term: Term) -> tuple[str, list]:
    """An exact test of one term against the row `s`'s text columns."""
    columns = source.text_columns
    if term.prefix:
        pattern = r"(?i)(?:^|\W)" + re.escape(term.text)
        tests = " OR ".join(f"s.{column} REGEXP %s" for column in columns)
        return f"({tests})", [pattern] * len(columns)
    if len(term.text) >= TRIGRAM:
        fts = source.sqlite_fts_table
        return f"s.id IN (SELECT rowid FROM {fts} WHERE {fts} MATCH %s)", [_phrase(term.text)]
    pieces, params = [], []
    for variant in _case_variants(term.text):
        for column in columns:
            pieces.append(rf"s.{column} LIKE %s ESCAPE '\'")
            params.append(_like_contains(variant))
    return "(" + " OR ".join(pieces) + ")", params


def _sqlite_hits(source, parsed, where, message_excluded, limit):
    indexed = [clause for clause in parsed.clauses if clause_is_indexable(clause)]
    fts = source.sqlite_fts_table
    match = " AND ".join(
        "(" + " OR ".join(_phrase(term.text) for term in clause) + ")" for clause in indexed
    )
    in_match = [t for t in parsed.excluded if len(t.text) >= TRIGRAM and not t.prefix]
    if in_match:
        match = f"({match}) NOT ({' OR '.join(_phrase(t.text) for t in in_match)})"
    tests, params = [], []
    for clause in parsed.clauses:
        if clause in indexed and not any(term.prefix for term in clause):
            continue  # the MATCH decided it
        pieces = [_sqlite_term(source, term) for term in clause]
        tests.append("(" + " OR ".join(piece for piece, _ in pieces) + ")")
        params += [p for _, piece_params in pieces for p in piece_params]
    for term in parsed.excluded:
        if term in in_match:
            continue
        piece, piece_params = _sqlite_term(source, term)
        tests.append(f"NOT {piece}")
        params += piece_params
    tests_sql = "".join(f" AND {test}" for test in tests)
    # The index yields rowids newest first (FTS5 consumes the ORDER BY), and CROSS JOIN keeps
    # it the outer loop, so the LIMIT stops the scan early.
    sql = (
        f"SELECT s.id, s.{source.message_column} FROM {fts}"
        f" CROSS JOIN {source.table} s ON s.id = {fts}.rowid"
        f" CROSS JOIN chats_message m ON m.id = s.{source.message_column}"
        f" WHERE {fts} MATCH %s AND {where[0]} AND {message_excluded[0]}{tests_sql}"
        f" ORDER BY {fts}.rowid DESC LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [match, *where[1], *message_excluded[1], *params, limit])
        return [tuple(row) for row in cursor.fetchall()]


# --- PostgreSQL -------------------------------------------------------------------------


def _postgresql_term(source: SearchTextSource, term: Term, *, indexed: bool) -> tuple[str, list]:
    """A test of `term` on the row `s`'s text columns, as ILIKE answers it; with `indexed`,
    written so the trigram indexes serve words of three characters or more, and no shorter
    one (the index would read all of itself for them)."""
    pieces, params = [], []
    for column in source.text_columns:
        if len(term.text) >= TRIGRAM or not indexed:
            pieces.append(f"s.{column} ILIKE %s")
            params.append(_like_contains(term.text))
        else:
            pieces.append(f"strpos(lower(s.{column}), lower(%s)) > 0")
            params.append(term.text)
    sql = "(" + " OR ".join(pieces) + ")"
    if term.prefix:
        regex = r"(^|\W)" + regex_literal(term.text)
        sql = (
            f"({sql} AND ("
            + " OR ".join(f"(s.{column} || '') ~* %s" for column in source.text_columns)
            + "))"
        )
        params += [regex] * len(source.text_columns)
    return sql, params


def _postgresql_match(source, parsed, *, indexed: bool) -> tuple[str, list]:
    pieces, params = [], []
    for clause in parsed.clauses:
        alternatives = [_postgresql_term(source, term, indexed=indexed) for term in clause]
        pieces.append("(" + " OR ".join(sql for sql, _ in alternatives) + ")")
        params += [p for _, term_params in alternatives for p in term_params]
    for term in parsed.excluded:
        sql, term_params = _postgresql_term(source, term, indexed=False)
        pieces.append(f"NOT {sql}")
        params += term_params
    return " AND ".join(pieces), params


def _postgresql_hits(source, parsed, where, message_excluded, limit):
    table, message = source.table, source.message_column
    joined = f"{table} s JOIN chats_message m ON m.id = s.{message}"
    # The newest rows in scope first: a common word ends here, after reading a few texts.
    walk_match, walk_params = _postgresql_match(source, parsed, indexed=False)
    newest = f"SELECT s.id FROM {joined} WHERE {where[0]} ORDER BY s.id DESC LIMIT %s"
    scope_step = [*where[1], WALK_ROWS]
    # The texts are tested outside the inner LIMIT: only the newest rows' texts are read
    # (left to itself, the planner may test every text of the table, then keep the newest).
    columns = ", ".join(f"s.{column}" for column in source.text_columns)
    sql = (
        f"SELECT s.id, s.{message} FROM (SELECT s.id, s.{message}, {columns} FROM {joined}"
        f" WHERE {where[0]} ORDER BY s.id DESC LIMIT %s) s"
        f" JOIN chats_message m ON m.id = s.{message} WHERE {walk_match}"
        f" AND {message_excluded[0]} ORDER BY s.id DESC LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*scope_step, *walk_params, *message_excluded[1], limit])
        rows = cursor.fetchall()
    hits = [(row[0], row[1]) for row in rows]
    if len(hits) >= limit:
        return hits
    # Then the index, for the rows older than those the walk read.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT min(id), count(*) FROM ({newest}) w", scope_step)
        oldest, walked = cursor.fetchone()
    if walked < WALK_ROWS:
        return hits  # the scope holds no older row
    match, match_params = _postgresql_match(source, parsed, indexed=True)
    sql = (
        f"SELECT s.id, s.{message} FROM {joined} WHERE {where[0]} AND s.id < %s AND {match}"
        f" AND {message_excluded[0]} ORDER BY s.id DESC LIMIT %s"
    )
    params = [*where[1], oldest, *match_params, *message_excluded[1], limit - len(hits)]
    # A long text holds most trigrams: for words whose trigrams are everywhere, the index
    # narrows little and every candidate's whole text is tested again. Bounded in time:
    # past INDEX_MS the statement is cancelled (in a savepoint: the caller's transaction
    # goes on) and the search answers with what it found (logged).
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [INDEX_MS])
            rows = without_walking(sql, params)
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout TO DEFAULT")
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != QUERY_CANCELED:
            raise
        logger.warning("file search stopped after %s ms: %d hits so far", INDEX_MS, len(hits))
        return hits
    return hits + [(row[0], row[1]) for row in rows]


# --- Snippets ---------------------------------------------------------------------------


def source_snippets(
    source: SearchTextSource, row_ids: Iterable[int], terms: list[str]
) -> dict[int, SourceSnippet]:
    """For each row, a window of its text around the first of `terms` found (looked up in
    the database: at most SNIPPET_WINDOW characters of each text column leave it), with the
    row's label. A row whose text has none of them (a case SQLite's lower() cannot fold)
    gets the start of its text."""
    row_ids = list(row_ids)
    if not row_ids:
        return {}
    sqlite = connection.vendor == "sqlite"
    find, bigger = ("instr", "max") if sqlite else ("strpos", "greatest")
    # The terms of the first clause: every hit holds one of them (in its index or tests).
    lowered = [term.lower() for term in terms] or [""]
    found_columns, params = [], []
    for column in source.text_columns:
        tries = [f"NULLIF({find}(lower(s.{column}), %s), 0)" for _ in lowered]
        found_columns.append(f"COALESCE({', '.join(tries)}, 0) AS p_{column}")
        params += lowered
    windows = []
    for column in source.text_columns:
        start = f"{bigger}(1, f.p_{column} - {SNIPPET_BEFORE})"
        windows += [
            f"f.p_{column}",
            f"{start}",
            f"substr(s.{column}, {start}, {SNIPPET_WINDOW})",
            f"length(s.{column})",
        ]
    placeholders = ", ".join(["%s"] * len(row_ids))
    # Each position is computed once (MATERIALIZED: SQLite 3.35+, PostgreSQL 12+); an older
    # SQLite inlines the CTE and computes it again for the window, which is only slower.
    old_sqlite = sqlite and connection.Database.sqlite_version_info < (3, 35)
    materialized = "AS" if old_sqlite else "AS MATERIALIZED"
    sql = (
        f"WITH f {materialized} (SELECT s.id, {', '.join(found_columns)} FROM {source.table} s"
        f" WHERE s.id IN ({placeholders}))"
        f" SELECT s.id, s.{source.label_column}, {', '.join(windows)}"
        f" FROM f JOIN {source.table} s ON s.id = f.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *row_ids])
        rows = cursor.fetchall()
    snippets = {}
    for row in rows:
        row_id, label, cells = row[0], row[1], row[2:]
        per_column = [cells[i : i + 4] for i in range(0, len(cells), 4)]
        chosen = next((c for c in per_column if c[0]), None) or next(
            (c for c in per_column if c[3]), per_column[0]
        )
        _, start, text, length = chosen
        text = text or ""
        start = int(start or 1)
        snippets[row_id] = SourceSnippet(
            matched_in=MatchedIn(source.name, source.noun, row_id, label),
            text=text,
            cut_before=start > 1,
            cut_after=start - 1 + len(text) < int(length or 0),
        )
    return snippets
