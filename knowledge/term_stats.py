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

Counts are bounded (a count stops at the budget: one short read of the term's posting list),
taken through the index's own tokenizer and stemmer (the term is MATCHed / @@-ed as the
search does), over all collections (a document frequency, as bm25's own), and kept per
process for STATS_SECONDS: a stale count only moves a term across the line, never what a
reader may see. An index of at most SCORED_PASSAGES passages prunes nothing (no count).
"""

import threading
import time
from dataclasses import dataclass

from django.db import connection, transaction

# Passages the kept terms may hold in all (an upper bound of the passages ranked).
SCORED_PASSAGES = 2500
# A question of frequent terms only: at most this many of them (the rarest) must all match.
MAX_REQUIRED_TERMS = 4
STATS_SECONDS = 300
MAX_CACHED_TERMS = 20_000

_lock = threading.Lock()
_counts: dict[tuple[str, str], tuple[float, int]] = {}  # (database alias, term) -> (when, count)
_totals: dict[str, tuple[float, int]] = {}


@dataclass(frozen=True)
class Selection:
    """The terms to query and how: any of them (OR), or all of them (AND)."""

    terms: list[str]
    require_all: bool = False


def select_terms(terms: list[str]) -> Selection:
    """The question's rarest terms whose passages add up to at most SCORED_PASSAGES; the
    rarest few, all required, when the rarest alone holds more. Question order kept."""
    if len(terms) <= 1 or passage_total() <= SCORED_PASSAGES:
        return Selection(terms)
    counts = term_counts(terms, SCORED_PASSAGES)
    by_rarity = sorted(terms, key=lambda term: counts[term])
    if counts[by_rarity[0]] > SCORED_PASSAGES:
        required = set(by_rarity[:MAX_REQUIRED_TERMS])
        return Selection([term for term in terms if term in required], require_all=True)
    kept, held = set(), 0
    for term in by_rarity:
        if held + counts[term] > SCORED_PASSAGES:
            break
        kept.add(term)
        held += counts[term]
    return Selection([term for term in terms if term in kept])


def passage_total() -> int:
    """Passages in the index (all collections), counted at most every STATS_SECONDS."""
    alias = connection.alias
    now = time.monotonic()
    with _lock:
        held = _totals.get(alias)
    if held is not None and now - held[0] < STATS_SECONDS:
        return held[1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM knowledge_passage")
        total = int(cursor.fetchone()[0])
    with _lock:
        _totals[alias] = (now, total)
    return total


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
        # One round trip; each count stops at `cap` rows of the GIN index's bitmap (never a
        # sequential scan: for a rare term it would read every passage to find `cap`).
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(
                "SELECT t, (SELECT count(*) FROM (SELECT 1 FROM knowledge_passage"
                " WHERE search_vector @@ to_tsquery('english', quote_literal(t)) LIMIT %s) s)"
                " FROM unnest(%s::text[]) AS t",
                [cap, terms],
            )
            return {term: int(count) for term, count in cursor.fetchall()}
    raise NotImplementedError(connection.vendor)  # pragma: no cover


def forget() -> None:
    """Drop the per-process counts (tests, after a bulk change)."""
    with _lock:
        _counts.clear()
        _totals.clear()
