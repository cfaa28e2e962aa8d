"""How many passages hold a search term, so that full-text search can leave out the terms that
hold a big share of them.

Why: full-text search ORs the question's terms, and ranking (bm25 / ts_rank_cd) scores every
passage that holds any of them: at 200,000 passages a frequent word meant ~70,000 passages
scored for one question (SQLite's p95 192 ms, PostgreSQL's 333 ms), and even rare-ish terms
add up (bm25 costs ~15-25 µs a passage on this machine under load: its sizes are read per
passage). A frequent term's weight in the ranking is small anyway (a low inverse document
frequency). So, like a search engine's pruning, the question's terms are kept rarest first
while the passages they hold add up to at most SCORED_PASSAGES:

- the rarest term is always kept; a term that would pass the budget is left out;
- when even the rarest term holds more than SCORED_PASSAGES passages (a question of frequent
  words only), the rarest MAX_REQUIRED_TERMS terms must **all** match (fewer passages, and the
  right ones), so a passage made only of frequent words is still found.

Counts (SQLite: bounded, a count stops at the budget, one short read of the term's posting
list; PostgreSQL: estimated from the planner's statistics of the column, below) go through
the index's own tokenizer and stemmer, are over all collections (a document frequency, as
bm25's own), and are kept per process for STATS_SECONDS: a stale count only moves a term
across the line, never what a reader may see. An index of at most SCORED_PASSAGES passages
prunes nothing (no count).
"""

import threading
import time
from dataclasses import dataclass

from django.db import connection

# Passages the kept terms may hold in all (an upper bound of the passages ranked). PostgreSQL
# ranks from each match's stored tsvector (its TOAST pages: ~75 µs a match at 200,000 under
# load, 3-5 times bm25's cost), so it gets a smaller budget.
SCORED_PASSAGES = 2500
SCORED_PASSAGES_POSTGRESQL = 1000
# A question of frequent terms only: at most this many of them (the rarest) must all match.
MAX_REQUIRED_TERMS = 4
STATS_SECONDS = 300
MAX_CACHED_TERMS = 20_000

_lock = threading.Lock()
_counts: dict[tuple[str, str], tuple[float, int]] = {}  # (database alias, term) -> (when, count)
_totals: dict[str, tuple[float, int]] = {}  # database alias -> (when, passages)
_lexemes: dict[str, tuple[float, tuple]] = {}  # database alias -> (when, (shares, floor))


@dataclass(frozen=True)
class Selection:
    """The terms to query and how: any of them (OR), or all of them (AND)."""

    terms: list[str]
    require_all: bool = False


def select_terms(terms: list[str]) -> Selection:
    """The question's rarest terms whose passages add up to at most SCORED_PASSAGES; the
    rarest few, all required, when the rarest alone holds more. Question order kept."""
    budget = scored_passages()
    if len(terms) <= 1 or passage_total() <= budget:
        return Selection(terms)
    counts = term_counts(terms, budget)
    by_rarity = sorted(terms, key=lambda term: counts[term])
    if counts[by_rarity[0]] > budget:
        required = set(by_rarity[:MAX_REQUIRED_TERMS])
        return Selection([term for term in terms if term in required], require_all=True)
    kept, held = set(), 0
    for term in by_rarity:
        if held + counts[term] > budget:
            break
        kept.add(term)
        held += counts[term]
    return Selection([term for term in terms if term in kept])


def scored_passages() -> int:
    """The budget of passages the kept terms may hold, for this database."""
    if connection.vendor == "postgresql":
        return SCORED_PASSAGES_POSTGRESQL
    return SCORED_PASSAGES


def _held(store: dict, key, make):
    """`store[key]` made by `make()` at most every STATS_SECONDS (per process)."""
    now = time.monotonic()
    with _lock:
        held = store.get(key)
    if held is not None and now - held[0] < STATS_SECONDS:
        return held[1]
    value = make()
    with _lock:
        store[key] = (now, value)
    return value


def passage_total() -> int:
    """Passages in the index (all collections), counted at most every STATS_SECONDS."""

    def count() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM knowledge_passage")
            return int(cursor.fetchone()[0])

    return _held(_totals, connection.alias, count)


def term_counts(terms: list[str], limit: int) -> dict[str, int]:
    """term -> passages holding it, counted up to limit + 1 (more is "common" anyway)."""
    alias = connection.alias
    now = time.monotonic()
    found: dict[str, int] = {}
    with _lock:
        for term in terms:
            held = _counts.get((alias, term))
            if held is not None and now - held[0] < STATS_SECONDS:
                found[term] = held[1]
    missing = [term for term in terms if term not in found]
    if missing:
        counted = _count(missing, limit + 1)
        with _lock:
            if len(_counts) + len(counted) > MAX_CACHED_TERMS:
                _counts.clear()
            for term, count in counted.items():
                _counts[(alias, term)] = (now, count)
        found.update(counted)
    return found


def _count(terms: list[str], cap: int) -> dict[str, int]:
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            counts = {}
            for term in terms:
                cursor.execute(
                    "SELECT count(*) FROM (SELECT 1 FROM knowledge_passage_fts"
                    " WHERE knowledge_passage_fts MATCH %s LIMIT %s)",
                    ['"' + term.replace('"', '""') + '"', cap],
                )
                counts[term] = int(cursor.fetchone()[0])
            return counts
    if connection.vendor == "postgresql":
        return _postgresql_counts(terms)
    raise NotImplementedError(connection.vendor)  # pragma: no cover


def _postgresql_counts(terms: list[str]) -> dict[str, int]:
    """Estimates from the planner's statistics of `search_vector` (ANALYZE keeps its 10,000
    most common lexemes, migration 0005, with the share of rows holding each): counting as
    SQLite does would visit each matching row's page (~100 ms a term at 200,000 under load).
    A term whose lexemes are not among them is rarer than the least common one kept (~0.15 %
    of the passages): counted as half of that. Without statistics (before the first
    ANALYZE), nothing is pruned."""
    common, floor = _lexeme_shares()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t, array(SELECT lexeme FROM unnest(to_tsvector('english', t)))"
            " FROM unnest(%s::text[]) AS t",
            [terms],
        )
        lexemes = dict(cursor.fetchall())
    counts = {}
    for term in terms:
        shares = [common.get(lexeme, floor / 2) for lexeme in lexemes.get(term) or []]
        counts[term] = int(max(shares, default=0.0))
    return counts


def _lexeme_shares() -> tuple[dict[str, float], float]:
    """(lexeme -> passages holding it, passages holding the least common of them), from
    pg_stats; ({}, 0) without statistics. Read at most every STATS_SECONDS."""
    return _held(_lexemes, connection.alias, _read_lexeme_shares)


def _read_lexeme_shares() -> tuple[dict[str, float], float]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples"
            " FROM pg_stats s JOIN pg_class c ON c.oid = 'knowledge_passage'::regclass"
            " WHERE s.schemaname = current_schema() AND s.tablename = 'knowledge_passage'"
            " AND s.attname = 'search_vector'"
        )
        row = cursor.fetchone()
    common, floor = {}, 0.0
    if row and row[0] and row[1] and row[2] and row[2] > 0:
        elements, shares, rows = row
        # The shares end with three more numbers: the least and most common share, and nulls'.
        common = {lexeme: share * rows for lexeme, share in zip(elements, shares, strict=False)}
        floor = shares[len(elements)] * rows
    return common, floor


def forget() -> None:
    """Drop the per-process counts (tests, after a bulk change)."""
    with _lock:
        _counts.clear()
        _totals.clear()
        _lexemes.clear()
