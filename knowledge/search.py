"""Hybrid retrieval over passages: a ranked full-text search (SQLite FTS5 with bm25(),
PostgreSQL tsvector with ts_rank_cd) and a vector search (knowledge.vectors), fused by
reciprocal rank fusion. Every function takes the collection ids to search: callers get them
from knowledge.access (the readers rule), never from a person's input alone.
"""

import logging
import re
from dataclasses import dataclass

from django.db import connection

from knowledge.embeddings import EmbeddingsUnavailable
from knowledge.models import Passage
from knowledge.splitting import search_form
from knowledge.term_stats import scored_passages, select_terms

logger = logging.getLogger(__name__)
RRF_K = 60
CANDIDATES = 50  # per method, before fusion
MAX_QUERY_CHARS = 1000
MAX_TERMS = 48
# Words that match nearly every passage: left out of the OR query (ranking would bury them
# anyway, at the cost of reading every posting list).
_STOPWORDS_TEXT = """a an and are as at be by can do does for from how i if in is it me my of
on or our should so that the their then there these this to was we what when where which who
why will with you your"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Hit:
    passage_id: int
    score: float
    fulltext_rank: int | None = None
    vector_rank: int | None = None


def query_terms(query: str) -> list[str]:
    """The distinct terms of a question as the index reads them (CJK as bigrams), without
    stop words, at most MAX_TERMS."""
    terms: list[str] = []
    for word in _WORD.findall(search_form(query[:MAX_QUERY_CHARS]).lower()):
        if word in STOPWORDS or word in terms or (len(word) == 1 and word.isascii()):
            continue
        terms.append(word)
    return terms[:MAX_TERMS]


def fulltext_search(query: str, collection_ids: list[int], *, limit: int = CANDIDATES) -> list[int]:
    """Passage ids of those collections, best first, ranked by BM25 (SQLite) or ts_rank_cd
    (PostgreSQL) over any of the question's terms."""
    terms = query_terms(query)
    if not terms or not collection_ids:
        return []
    # Common terms out when rarer ones exist, or all required (knowledge.term_stats).
    selection = select_terms(terms)
    terms = selection.terms
    if connection.vendor == "sqlite":
        match = (" AND " if selection.require_all else " OR ").join(
            '"' + term.replace('"', '""') + '"' for term in terms
        )
        marks = ",".join("%s" for _ in collection_ids)
        # The collection filter reads the small (collection, id) index, not each matching
        # passage's row (half the time at 200,000 passages: docs/BENCHMARKS.md).
        sql = (
            "SELECT p.id FROM knowledge_passage_fts f"
            " JOIN knowledge_passage p INDEXED BY knowledge_passage_coll"
            f" ON p.collection_id IN ({marks}) AND p.id = f.rowid"
            " WHERE knowledge_passage_fts MATCH %s"
            " ORDER BY bm25(knowledge_passage_fts) LIMIT %s"
        )
        params = [*collection_ids, match, limit]
    elif connection.vendor == "postgresql":
        # Each term through the same configuration as the index, OR-ed: plainto_tsquery ANDs.
        # ts_rank_cd reads each match's stored tsvector (its row, often its TOAST): at most
        # scored_passages() matches are ranked (the kept terms rarely hold more).
        sql = (
            "WITH q AS (SELECT to_tsquery('english', %s) AS query),"
            " c AS (SELECT p.id, p.search_vector FROM knowledge_passage p, q"
            " WHERE p.search_vector @@ q.query AND p.collection_id = ANY(%s) LIMIT %s)"
            " SELECT c.id FROM c, q"
            " ORDER BY ts_rank_cd(c.search_vector, q.query, 1) DESC, c.id LIMIT %s"
        )
        lexemes = (" & " if selection.require_all else " | ").join(
            "'" + term.replace("'", "''") + "'" for term in terms
        )
        params = [lexemes, list(collection_ids), scored_passages(), limit]
    else:  # pragma: no cover
        raise NotImplementedError(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def vector_search(query: str, collection_ids: list[int], *, limit: int = CANDIDATES) -> list[int]:
    """Passage ids of those collections, nearest to the question's embedding first."""
    from knowledge.vectors import nearest

    if not collection_ids or not query.strip():
        return []
    return nearest(query[:MAX_QUERY_CHARS], collection_ids, limit=limit)


def fuse(rankings: list[list[int]], *, k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score = sum of 1 / (k + rank) over the rankings."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, passage_id in enumerate(ranking, start=1):
            scores[passage_id] = scores.get(passage_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def hybrid_search(
    query: str, collection_ids: list[int], *, limit: int = 5, mode: str = "hybrid"
) -> list[Hit]:
    """The best `limit` passages for `query` in those collections. `mode`: "hybrid"
    (default), "fulltext" or "vector" (the evaluation compares them)."""
    text_ids = fulltext_search(query, collection_ids) if mode != "vector" else []
    vector_ids: list[int] = []
    if mode != "fulltext":
        try:
            vector_ids = vector_search(query, collection_ids)
        except EmbeddingsUnavailable as exc:
            # The question cannot be embedded (the server is down): full-text alone answers.
            logger.warning("knowledge: vector search skipped: %s", exc)
    text_rank = {pid: r for r, pid in enumerate(text_ids, start=1)}
    vector_rank = {pid: r for r, pid in enumerate(vector_ids, start=1)}
    fused = fuse([ranking for ranking in (text_ids, vector_ids) if ranking])
    return [
        Hit(pid, score, text_rank.get(pid), vector_rank.get(pid)) for pid, score in fused[:limit]
    ]


def passages_for(hits: list[Hit]) -> list[Passage]:
    """The hits' passages with their documents and collections, in the hits' order."""
    by_id = Passage.objects.select_related("document", "collection").in_bulk(
        [hit.passage_id for hit in hits]
    )
    return [by_id[hit.passage_id] for hit in hits if hit.passage_id in by_id]
