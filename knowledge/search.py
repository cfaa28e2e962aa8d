"""Hybrid retrieval over passages: a ranked full-text search (SQLite FTS5 with bm25(),
PostgreSQL tsvector with ts_rank per term weighed by the term's rarity; a passage's heading
path weighs more than its body: HEADING_WEIGHT, PG_HEADING_WEIGHT) and a vector search
(knowledge.vectors), fused by reciprocal rank fusion, then diversified so that one long
section cannot fill every place (MAX_PER_SECTION). A question whose script the collection's
index never saw (a Chinese question over English documents) would match only its stray
Latin words: its full-text side searches its words translated by dictionary
(knowledge.crosslingual), or it goes by vectors alone.
Every function takes the collection ids to search: callers get them from knowledge.access
(the readers rule), never from a person's input alone.
"""

import logging
import re
from dataclasses import dataclass

from django.db import connection

from knowledge.embeddings import EmbeddingsUnavailable
from knowledge.models import Passage
from knowledge.splitting import has_cjk, search_form
from knowledge.term_stats import scored_passages, select_terms

logger = logging.getLogger(__name__)
RRF_K = 20
CANDIDATES = 50  # per method, before fusion
# The full-text weight of a passage's heading path (document title › section) against its
# body's 1.0: a question's words in a heading say more than the same words in passing.
HEADING_WEIGHT = 5.0
# The same for PostgreSQL's ts_rank, a different ranking (no document frequencies, terms
# saturate on their own): 1.5 measured best of 1, 1.5, 2.5 and 5 (docs/BENCHMARKS.md).
PG_HEADING_WEIGHT = 1.5
# ts_rank's length normalisation of each term's rank: none (0). Passages are already cut to
# about the same length by the splitter, and dividing by 1 + log(length) (1) lifted short
# NAME and SEE ALSO lines: on the eval 0 beat 1, 2, 8, 16 and 32 on the 61 pages (full-text
# 0.721 -> 0.746, hybrid MRR 0.582 -> 0.626) and on the whole manual (hybrid 0.664 -> 0.721,
# where 1 left it below vectors alone), docs/BENCHMARKS.md.
PG_RANK_NORMALIZATION = 0
# At most this many passages of one section (document + heading path) among the results
# before any passage of another section; more only when too few sections answer at all.
MAX_PER_SECTION = 1
# The full-text ranking's weight in the fusion against the vectors' 1.0.
FULLTEXT_WEIGHT = 1.0
# A passage's fused score is lifted by this times the best fused score of its document: the
# page that answers best brings its other sections up (a man page's NAME line often ranks
# first while its DESCRIPTION holds the answer). 0 turns it off. Chosen with RRF_K on
# bench/knowledge_eval.py (docs/BENCHMARKS.md, "Team knowledge"), both halves agreeing.
DOCUMENT_WEIGHT = 2.0
# The weight in the fusion of the full-text ranking of a question translated by dictionary
# (a Chinese question over English documents: knowledge.crosslingual); 0: such a question
# goes by vectors alone.
CROSS_LINGUAL_WEIGHT = 1.0
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
    """Passage ids of those collections, best first, ranked by BM25 (SQLite) or by ts_rank
    per term weighed by the term's rarity (PostgreSQL) over any of the question's terms."""
    terms = query_terms(query)
    if not terms or not collection_ids:
        return []
    # Common terms out when rarer ones exist, or all required (knowledge.term_stats).
    selection = select_terms(terms)
    found = _fulltext_ranked(selection.terms, selection.require_all, collection_ids, limit)
    if not found and selection.require_all and len(selection.terms) > 1:
        # No passage holds all of them: any of them, as an unpruned question would (on
        # PostgreSQL still at most scored_passages() matches ranked).
        found = _fulltext_ranked(selection.terms, False, collection_ids, limit)
    return found


def _fulltext_ranked(
    terms: list[str], require_all: bool, collection_ids: list[int], limit: int
) -> list[int]:
    if connection.vendor == "sqlite":
        match = (" AND " if require_all else " OR ").join(
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
            " ORDER BY bm25(knowledge_passage_fts, %s, 1.0) LIMIT %s"
        )
        params = [*collection_ids, match, HEADING_WEIGHT, limit]
    elif connection.vendor == "postgresql":
        sql, params = _postgresql_ranked(terms, require_all, collection_ids, limit)
    else:  # pragma: no cover
        raise NotImplementedError(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def _postgresql_ranked(
    terms: list[str], require_all: bool, collection_ids: list[int], limit: int
) -> tuple[str, list]:
    """PostgreSQL's ranking, each term weighed by its rarity as bm25 does on SQLite: the sum
    over the question's terms of idf(term) x ts_rank(passage, term). ts_rank over the whole
    OR query has no document frequencies: a passage repeating a common word ("commit")
    outranked one holding a rare one (eval: hybrid recall@5 0.770 -> 0.803 with the
    weights). A term's document frequency is counted among the matches (every passage that
    holds any term, up to scored_passages(): exact unless that cap cuts them), against all
    the index's passages (term_stats.passage_total, as bm25's own statistics; a stale total
    below a term's count counts as that count, so no weight turns negative). Each match's
    tsvector is read (detoasted) once, into the materialised candidates, not once per term.
    Not ts_rank_cd: with an OR query every occurrence of any term is a cover."""
    from knowledge.term_stats import passage_total

    lexemes = (" & " if require_all else " | ").join(
        "'" + term.replace("'", "''") + "'" for term in terms
    )
    sql = (
        "WITH c AS MATERIALIZED (SELECT p.id, p.search_vector || ''::tsvector AS v"
        " FROM knowledge_passage p"
        " WHERE p.search_vector @@ to_tsquery('english', %s) AND p.collection_id = ANY(%s)"
        " LIMIT %s),"
        " t AS (SELECT term, to_tsquery('english', quote_literal(term)) AS query"
        " FROM unnest(%s::text[]) AS term),"
        " m AS MATERIALIZED (SELECT c.id, t.term,"
        " ts_rank(%s::float4[], c.v, t.query, %s) AS rank FROM c JOIN t ON c.v @@ t.query),"
        " df AS (SELECT term, count(*) AS n FROM m GROUP BY term)"
        " SELECT m.id FROM m JOIN df USING (term)"
        " GROUP BY m.id"
        " ORDER BY sum(ln(1 + (greatest(%s, df.n) - df.n + 0.5) / (df.n + 0.5)) * m.rank)"
        " DESC, m.id"
        " LIMIT %s"
    )
    params = [lexemes, list(collection_ids), scored_passages(), terms, _pg_weights()]
    return sql, [*params, PG_RANK_NORMALIZATION, passage_total(), limit]


def _pg_weights() -> list[float]:
    """ts_rank's weights {D, C, B, A}: the body is D (0.1, the default), the heading path A
    (knowledge/migrations/0004_passage_search_heading.py); C and B are unused."""
    return [0.1, 0.1, 0.1, 0.1 * PG_HEADING_WEIGHT]


def unreadable_script(query: str, collection_ids: list[int]) -> bool:
    """Whether the question is written in a script (CJK) none of whose words the collections'
    full-text index holds: a Chinese question over English documents. Its full-text matches
    are then only its stray Latin words ("git"), noise that fusion would mix into the vector
    ranking, which reads across languages."""
    cjk = [term for term in query_terms(query) if has_cjk(term)]
    return bool(cjk) and not fulltext_search(" ".join(cjk), collection_ids, limit=1)


def vector_search(
    query: str, collection_ids: list[int], *, limit: int = CANDIDATES, question_vector=None
) -> list[int]:
    """Passage ids of those collections, nearest to the question's embedding first
    (`question_vector` when the caller made it already)."""
    from knowledge.vectors import nearest

    if not collection_ids or not query.strip():
        return []
    return nearest(query[:MAX_QUERY_CHARS], collection_ids, limit=limit, vector=question_vector)


def fuse(
    rankings: list[list[int]], *, k: int | None = None, weights: list[float] | None = None
) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score = sum of weight / (k + rank) over the rankings (k is
    RRF_K, weights 1.0, unless given)."""
    k = RRF_K if k is None else k
    scores: dict[int, float] = {}
    for index, ranking in enumerate(rankings):
        weight = weights[index] if weights else 1.0
        for rank, passage_id in enumerate(ranking, start=1):
            scores[passage_id] = scores.get(passage_id, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def sections_of(passage_ids: list[int]) -> dict[int, tuple[int, str]]:
    """Each passage's section: (document id, heading path)."""
    return {
        pid: (document_id, section)
        for pid, document_id, section in Passage.objects.filter(pk__in=passage_ids).values_list(
            "id", "document_id", "section"
        )
    }


def diversify(
    ranked: list[tuple[int, float]],
    *,
    limit: int,
    per_section: int | None = None,
    sections: dict[int, tuple[int, str]] | None = None,
) -> list[tuple[int, float]]:
    """The first `limit` of `ranked` taking at most `per_section` passages of one section
    (document + heading path) before passages of other sections; the passages held back fill
    the places left, in their order. A man page's OPTIONS section spans many passages that
    all share a question's words; the section that answers may be the next one.
    `per_section` is MAX_PER_SECTION unless given; 0 keeps the order as it is."""
    per_section = MAX_PER_SECTION if per_section is None else per_section
    if per_section <= 0:
        return ranked[:limit]
    if sections is None:
        sections = sections_of([pid for pid, _ in ranked])
    taken: list[tuple[int, float]] = []
    held: list[tuple[int, float]] = []
    counts: dict[tuple, int] = {}
    for item in ranked:
        key = sections.get(item[0], item[0])
        if counts.get(key, 0) < per_section:
            counts[key] = counts.get(key, 0) + 1
            taken.append(item)
            if len(taken) == limit:
                return taken
        else:
            held.append(item)
    return (taken + held)[:limit]


def hybrid_search(
    query: str, collection_ids: list[int], *, limit: int = 5, mode: str = "hybrid"
) -> list[Hit]:
    """The best `limit` passages for `query` in those collections. `mode`: "hybrid"
    (default), "fulltext" or "vector" (the evaluation compares them)."""
    embedding = None
    if mode == "hybrid" and collection_ids and query.strip():
        from knowledge.vectors import embed_beside

        try:
            # Embedded in another thread while this one runs the full-text search.
            embedding = embed_beside(query[:MAX_QUERY_CHARS])
        except EmbeddingsUnavailable:
            embedding = None  # vector_search says why below
    text_ids, text_weight = [], FULLTEXT_WEIGHT
    if mode != "vector":
        if has_cjk(query) and unreadable_script(query, collection_ids):
            # Only its stray Latin words would match: the dictionary's English words for its
            # Chinese ones search instead (knowledge.crosslingual), weighed apart.
            text_ids, text_weight = _translated_search(query, collection_ids)
        else:
            text_ids = fulltext_search(query, collection_ids)
    vector_ids: list[int] = []
    if mode != "fulltext":
        try:
            question_vector = embedding.result() if embedding is not None else None
            vector_ids = vector_search(query, collection_ids, question_vector=question_vector)
        except EmbeddingsUnavailable as exc:
            # The question cannot be embedded (the server is down): full-text alone answers.
            logger.warning("knowledge: vector search skipped: %s", exc)
    text_rank = {pid: r for r, pid in enumerate(text_ids, start=1)}
    vector_rank = {pid: r for r, pid in enumerate(vector_ids, start=1)}
    pairs = [(ids, w) for ids, w in ((text_ids, text_weight), (vector_ids, 1.0)) if ids]
    rankings, weights = [ids for ids, _ in pairs], [w for _, w in pairs]
    fused = fuse(rankings, weights=weights)
    sections = sections_of([pid for pid, _ in fused])
    if DOCUMENT_WEIGHT:
        fused = document_boost(fused, sections)
    return [
        Hit(pid, score, text_rank.get(pid), vector_rank.get(pid))
        for pid, score in diversify(fused, limit=limit, sections=sections)
    ]


def _translated_search(query: str, collection_ids: list[int]) -> tuple[list[int], float]:
    """The full-text ranking of a question in a script the collections do not hold, by
    its words translated (empty when CROSS_LINGUAL_WEIGHT is 0 or nothing translates),
    and its weight in the fusion."""
    if not CROSS_LINGUAL_WEIGHT:
        return [], 0.0
    from knowledge.crosslingual import translated_query

    translated = translated_query(query)
    if not translated:
        return [], 0.0
    return fulltext_search(translated, collection_ids), CROSS_LINGUAL_WEIGHT


def document_boost(
    fused: list[tuple[int, float]], sections: dict[int, tuple[int, str]]
) -> list[tuple[int, float]]:
    """`fused` re-ordered with each passage's score lifted by DOCUMENT_WEIGHT times the best
    score among its document's passages (a passage whose document is unknown counts alone)."""

    def document(pid: int):
        # A passage gone meanwhile is its own document (a key no document id can equal).
        return sections[pid][0] if pid in sections else ("passage", pid)

    best: dict = {}
    for pid, score in fused:
        best[document(pid)] = max(best.get(document(pid), 0.0), score)
    boosted = [(pid, score + DOCUMENT_WEIGHT * best[document(pid)]) for pid, score in fused]
    return sorted(boosted, key=lambda item: (-item[1], item[0]))


def passages_for(hits: list[Hit]) -> list[Passage]:
    """The hits' passages with their documents and collections, in the hits' order."""
    by_id = Passage.objects.select_related("document", "collection").in_bulk(
        [hit.passage_id for hit in hits]
    )
    return [by_id[hit.passage_id] for hit in hits if hit.passage_id in by_id]
