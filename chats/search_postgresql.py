"""How `chats.search` finds the newest matching messages on PostgreSQL.

Two plans, and PostgreSQL's planner cannot be trusted to choose between them: pg_trgm's row
estimates for `ILIKE '%word%'` come from ~100 sampled texts and swing by 100× from one
`ANALYZE` to the next (docs/BENCHMARKS.md, "Search").

- Walk: read the searcher's messages newest first and test each text, stopping at the
  limit. Cheap when matches are common: 20 hits of a word in 5 % of messages are among
  the newest ~400 readable ones.
- Index: the trigram index lists every candidate in the whole table; each is fetched
  and rechecked, then sorted. Cheap when candidates are few, whatever their age.

So the choice is made here, from a count rather than an estimate. One statement, EXPLAIN
ANALYZE of a one-row lookup of the query (`_count_candidates`), answers three things at
once: whether anything matches at all (its row: that is how a miss is answered); if the
planner took the trigram index, how many candidates the index holds (the bitmap index scan
collects them all before the first is fetched, and reports how many); if it read the table
instead (it does so for words it thinks common), how many rows it read before the first
match, which says how common they are. From that, the walk's length for `limit` hits and
the index's number of candidates are both known, and the cheaper plan runs, with the
planner told which. The walk's first step runs inside the statement that loads the
messages; further steps grow (to WALK_STEP_MAX), and between them what the walk has seen
can still switch it to the index for the older rest (a NOT, or a short word next to a
long one, whose rarity the count could not see).

Queries whose every clause has a word under three characters have no trigram to look up:
they walk (a miss among them was answered before, by `chats.search._surely_missing`).
"""

import json
import time
from collections.abc import Callable

from django.db import connection
from django.db.models.expressions import RawSQL

from chats.search_query import SearchQuery, Term

COUNT_MATCHES = 1
MESSAGES_TTL = 60.0
WALK_SAMPLE = 500
WALK_GROWTH = 4
# The longest step. Its LIMIT must stay well under the planner's guess of the scope's
# size, or it sorts the whole scope instead of walking (a bitmap scan of the readable chats
# and a sort of tens of thousands of rows); between steps the walk can switch to the index.
WALK_STEP_MAX = 5000
# A candidate from the index costs more than a walked message: its own heap page, a
# recheck of the whole text, and the sort of all candidates at the end.
INDEX_ROW_COST = 2.0

Scope = Callable[[], tuple[str, list] | None]
Load = Callable[[list[int] | RawSQL], list]


def clause_is_indexable(clause: list[Term]) -> bool:
    """Whether the trigram index can list every candidate of the clause: all its words
    have three characters or more."""
    return all(len(term.text) >= 3 for term in clause)


def postgresql_hits(parsed: SearchQuery, scope: Scope, limit: int, load: Load) -> list:
    """The newest `limit` messages matching `parsed` within `scope()` (a condition on `m`,
    or None for nothing), newest first, as `load` returns them for their ids."""
    indexed = [clause for clause in parsed.clauses if clause_is_indexable(clause)]
    sample = WALK_SAMPLE
    if indexed:
        any_match, candidates, matches = _count_candidates(parsed)
        if not any_match:
            return []
        if candidates is None and len(indexed) == len(parsed.clauses) and not parsed.excluded:
            candidates = matches  # every candidate is tested by the index alone
        # A walk that finds hits as often as there are matches, against fetching every
        # candidate.
        walk_cost = limit * _messages() / matches
        if candidates is not None and INDEX_ROW_COST * candidates < walk_cost:
            where = scope()
            return load(_from_index(parsed, where, None, limit)) if where else []
        # Else walk, as far as that predicts. (When the planner read the table for its
        # first match and the query has more than the index can test, how many candidates
        # the index would fetch is not known; if the hits turn out rare, the walk switches.)
        sample = min(max(sample, int(walk_cost * 3)), WALK_STEP_MAX)
    else:
        sample = WALK_STEP_MAX  # no count to go by; the LIMIT stops it early anyway
    where = scope()
    if where is None:
        return []
    # Most walks end within their first step: that step runs inside the statement that
    # loads the messages (one round trip less). Fewer hits than the limit there means the
    # scope ran out, or the step was too short: then the walk proper, step by step.
    messages = load(RawSQL(*_first_step(parsed, where, sample, limit)))
    if len(messages) >= limit:
        return messages
    below = _oldest_of_step(where, sample)
    if below is None:
        return messages  # the scope has no more than that
    more = _walk_newest_first(
        parsed,
        where,
        limit - len(messages),
        min(sample * WALK_GROWTH, WALK_STEP_MAX),
        indexable=bool(indexed),
        below=below,
        walked=sample,
        found=len(messages),  # (at least)
        hits_before=len(messages),
    )
    return messages + load(more) if more else messages


def _walk_newest_first(
    parsed, where, limit, sample, *, indexable, below=None, walked=0, found=0, hits_before=0
) -> list[int]:
    """Ids of the next `limit` hits, walking `sample` messages in scope at a time (growing
    to WALK_STEP_MAX), from the newest or from `below`: after `walked` messages, `found`
    of them matching the positive clauses and `hits_before` the whole query. Between steps
    what it has seen predicts whether the index would now be cheaper for the older rest."""
    hits: list[int] = []
    while True:
        rows = _walk(parsed, where, below=below, sample=sample, limit=limit - len(hits))
        hits += [row[0] for row in rows if row[1]]
        if len(hits) >= limit or not rows or rows[-1][2] != sample:
            return hits[:limit]  # the limit reached, or nothing older left to walk
        below, walked, found = rows[-1][0], walked + sample, found + rows[-1][3]
        missing = limit - len(hits)
        walk_cost = missing * walked / (hits_before + len(hits) + 0.5)
        # Ids are handed out in order: `below` is about the number of older messages.
        index_cost = INDEX_ROW_COST * (found + 0.5) / walked * below
        if indexable and index_cost < walk_cost:
            return hits + _from_index(parsed, where, below, missing)
        sample = min(sample * WALK_GROWTH, WALK_STEP_MAX)


def _first_step(parsed, where, sample, limit) -> tuple[str, list]:
    """SQL for the ids of the hits among the newest `sample` messages in scope (up to
    `limit`), as a walk step tests them (`_walk`)."""
    scope_sql, scope_params = where
    match_sql, match_params = _match_sql(parsed, alias="w", folded=_folds(parsed))
    sql = (
        f"SELECT w.id FROM (SELECT m.id, m.text, {_folded(parsed)} AS folded"
        f" FROM chats_message m WHERE {scope_sql} ORDER BY m.id DESC LIMIT %s) w"
        f" WHERE {match_sql} ORDER BY w.id DESC LIMIT %s"
    )
    return sql, [*scope_params, sample, *match_params, limit]


def _oldest_of_step(where, sample) -> int | None:
    """The oldest of the newest `sample` messages in scope; None if there are fewer."""
    scope_sql, scope_params = where
    sql = (
        f"SELECT min(id), count(*) FROM (SELECT m.id FROM chats_message m WHERE {scope_sql}"
        " ORDER BY m.id DESC LIMIT %s) step"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*scope_params, sample])
        oldest, count = cursor.fetchone()
    return oldest if count == sample else None


def _folds(parsed: SearchQuery) -> bool:
    """Whether a walk lower-cases each text once, up front: when two terms or more have
    letter case (ILIKE would lower it for each). With one, its ILIKE comes after the
    caseless tests and lowers only the texts that passed them."""
    terms = [*(term for clause in parsed.clauses for term in clause), *parsed.excluded]
    return sum(_has_case(term) for term in terms) >= 2


def _folded(parsed: SearchQuery) -> str:
    return "lower(m.text)" if _folds(parsed) else "NULL::text"


def _has_case(term: Term) -> bool:
    return term.text.lower() != term.text.upper()


def _walk(parsed, where, *, below, sample, limit) -> list[tuple]:
    """(id, hit, n, found) for the hits among the next `sample` messages in scope older
    than `below`, newest first, up to `limit` of them; and for the sample's last message
    (n == sample), with `found` how many messages of the sample its positive clauses
    matched (the walk's measure of how common the words are).

    The text tests sit outside the inner LIMIT, so no index on text can serve them: the
    plan is always the walk down the primary key (or (chat_id, id) for one chat). Each
    text is lower-cased once (ILIKE would do it again for every term)."""
    scope_sql, scope_params = where
    folds = _folds(parsed)
    match_sql, match_params = _match_sql(parsed, alias="w", folded=folds)
    if parsed.excluded:
        found_sql, found_params = _clauses_sql(parsed.clauses, alias="tested", folded=folds)
    else:
        found_sql, found_params = "hit", []
    older_sql, older_params = ("AND m.id < %s", [below]) if below is not None else ("", [])
    folded = _folded(parsed)
    sql = f"""
        SELECT id, hit, n, found FROM (
            SELECT id, hit, row_number() OVER seen AS n,
                   count(*) FILTER (WHERE {found_sql}) OVER seen AS found
            FROM (
                SELECT w.id, {match_sql} AS hit, w.text, w.folded
                FROM (
                    SELECT m.id, m.text, {folded} AS folded FROM chats_message m
                    WHERE {scope_sql} {older_sql}
                    ORDER BY m.id DESC LIMIT %s
                ) w
            ) tested
            WINDOW seen AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)
        ) counted
        WHERE hit OR n = %s
        ORDER BY id DESC LIMIT %s
    """
    params = [
        *found_params,
        *match_params,
        *scope_params,
        *older_params,
        sample,
        sample,
        limit + 1,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _count_candidates(parsed: SearchQuery) -> tuple[bool, int | None, int]:
    """(whether any message matches, how many candidates the trigram index holds for the
    query's indexable clauses or None, about how many messages match), in one statement.
    The number of matches is a rough guess from the first one (how many rows it took),
    enough to size the walk.

    It is EXPLAIN ANALYZE of a lookup of the first COUNT_MATCHES matches, planned freely.
    For words the planner thinks rare, a bitmap index scan collects every candidate before
    the first is fetched, and reports how many: the exact count for the cost of the index
    lookup. For words it thinks common, it reads the table until it has its matches, and
    how many rows that took says how common they are. Either way the statement's own rows
    are the existence check."""
    match_sql, match_params = _match_sql(parsed, alias="m", indexed=True)
    sql = (
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON)"
        f" SELECT 1 FROM chats_message m WHERE {match_sql} LIMIT {COUNT_MATCHES}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, match_params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    top = plan[0]["Plan"]
    found = top["Actual Rows"]
    if not found:
        return False, None, 0
    candidates = _bitmap_rows(top)
    # The rows read for the first match: from the table, or among the index's candidates
    # (then a phrase, a NOT or a short word that most candidates fail thins them out).
    share = found / (found + _rows_removed(top))
    if candidates is not None:
        return True, max(candidates, 1), max(int(candidates * share), 1)
    return True, None, max(int(_messages() * share), 1)


def _bitmap_rows(node: dict) -> int | None:
    """The TIDs a plan's bitmap index scans found (a union counts its parts' sum, an
    intersection its smallest part's: bounds, which is all a cost estimate needs), or
    None without a bitmap."""
    kind = node.get("Node Type")
    if kind == "Bitmap Index Scan":
        return node.get("Actual Rows", 0)
    children = [_bitmap_rows(child) for child in node.get("Plans", [])]
    children = [count for count in children if count is not None]
    if not children:
        return None
    if kind == "BitmapOr":
        return sum(children)
    if kind == "BitmapAnd":
        return min(children)
    return max(children)


def _rows_removed(node: dict) -> int:
    """Rows a plan read and dropped: failed filters, and index candidates that were not
    matches after all."""
    own = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return own + sum(_rows_removed(child) for child in node.get("Plans", []))


_messages_seen: tuple[float, int] = (float("-inf"), 0)


def _messages() -> int:
    """About how many messages there are (the newest id: ids are handed out in order),
    read at most once a minute per process: a cost estimate needs no more."""
    global _messages_seen
    seen_at, count = _messages_seen
    if time.monotonic() - seen_at > MESSAGES_TTL:
        with connection.cursor() as cursor:
            cursor.execute("SELECT max(id) FROM chats_message")
            count = cursor.fetchone()[0] or 0
        _messages_seen = (time.monotonic(), count)
    return count


def _from_index(parsed, where, below, limit) -> list[int]:
    """The newest `limit` matches in scope (older than `below`), from the index."""
    scope_sql, scope_params = where
    match_sql, match_params = _match_sql(parsed, alias="m", indexed=True)
    older_sql, older_params = ("AND m.id < %s", [below]) if below is not None else ("", [])
    sql = (
        f"SELECT m.id FROM chats_message m WHERE {scope_sql} {older_sql} AND {match_sql}"
        " ORDER BY m.id DESC LIMIT %s"
    )
    params = [*scope_params, *older_params, *match_params, limit]
    return [row[0] for row in without_walking(sql, params)]


def without_walking(sql: str, params: list) -> list[tuple]:
    """Rows of `sql` planned with the index on text: index scans (the walk down the
    primary key) and sequential scans off, for this statement only.

    One round trip: in autocommit, the statements are one implicit transaction and
    SET LOCAL ends with it; inside a transaction, three more statements put them back. JIT
    off as well: a disabled scan left in a plan (a tiny table with no index) counts as so
    expensive that PostgreSQL would spend ~100 ms compiling the statement."""
    script = (
        "SELECT set_config('enable_indexscan', 'off', true),"
        " set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true);"
        f" {sql}"
    )
    if connection.in_atomic_block:
        script += (
            "; SET LOCAL enable_indexscan TO DEFAULT; SET LOCAL enable_seqscan TO DEFAULT;"
            " SET LOCAL jit TO DEFAULT"
        )
    with connection.cursor() as cursor:
        cursor.execute(script, params)
        cursor.cursor.nextset()  # the statement's own rows, after set_config's
        return cursor.fetchall()


# --- Text tests -------------------------------------------------------------------------


def regex_literal(text: str) -> str:
    """`text` as a literal inside a PostgreSQL regular expression (ARE)."""
    return "".join("\\" + ch if ch.isascii() and not ch.isalnum() else ch for ch in text)


def _like_contains(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _term_sql(term: Term, *, alias: str, indexed: bool, folded: bool) -> tuple[str, list]:
    """A test of `term` on `alias`.text, as ILIKE would answer it (PostgreSQL's ILIKE
    lower-cases both sides and compares them).

    `indexed`: written so that the trigram index can serve terms of 3+ characters and no
    shorter one (it would read all of itself for them). `folded`: `alias`.folded holds
    lower(text), so case-insensitive tests are plain LIKEs on it."""
    has_case = _has_case(term)
    pattern = [_like_contains(term.text)]
    if folded and has_case:
        sql, params = f"{alias}.folded LIKE lower(%s)", pattern
    elif len(term.text) >= 3 or not indexed:
        # LIKE is much cheaper per row than ILIKE for text without letter case (Chinese),
        # where it means the same thing.
        sql, params = f"{alias}.text {'ILIKE' if has_case else 'LIKE'} %s", pattern
    else:
        column = f"lower({alias}.text)" if has_case else f"{alias}.text"
        sql = f"strpos({column}, {'lower(%s)' if has_case else '%s'}) > 0"
        params = [term.text]
    if term.prefix:
        # Checked on the LIKE's candidates only, never given to the index: pg_trgm's
        # analysis of a regex costs milliseconds to plan and to look up.
        sql += f" AND ({alias}.text || '') ~* %s"
        params.append(r"(^|\W)" + regex_literal(term.text))
    return f"({sql})", params


def _clauses_sql(
    clauses: list[list[Term]], *, alias: str, indexed: bool = False, folded: bool = False
) -> tuple[str, list]:
    pieces, params = [], []
    # Clauses without letter case first: their LIKE is cheap, and AND stops at the first
    # that fails.
    for clause in sorted(clauses, key=lambda clause: any(map(_has_case, clause))):
        alternatives = []
        for term in clause:
            piece, piece_params = _term_sql(term, alias=alias, indexed=indexed, folded=folded)
            alternatives.append(piece)
            params += piece_params
        pieces.append("(" + " OR ".join(alternatives) + ")")
    return "(" + (" AND ".join(pieces) or "TRUE") + ")", params


def _match_sql(
    parsed: SearchQuery, *, alias: str, indexed: bool = False, folded: bool = False
) -> tuple[str, list]:
    sql, params = _clauses_sql(parsed.clauses, alias=alias, indexed=indexed, folded=folded)
    for term in parsed.excluded:
        # An excluded word is only ever tested, never looked up.
        piece, piece_params = _term_sql(term, alias=alias, indexed=True, folded=folded)
        sql += f" AND NOT {piece}"
        params += piece_params
    return sql, params
