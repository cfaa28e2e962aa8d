"""Nearest passages to a question's embedding.

PostgreSQL: pgvector's cosine distance, through the HNSW index for 384-dimension vectors
(iterative scans keep the collection filter from starving the result), exact otherwise.

SQLite: this Python's sqlite3 may not load extensions (no sqlite-vec), so an embedded index
(knowledge.vector_index): each collection's vectors of the current model as int8 rows with a
scale each (a quarter of float32's memory) plus binary codes that pick the rows a big
collection's search rescores; held per process (recall and time in docs/BENCHMARKS.md). A
collection's index is rebuilt when its passages change (its newest passage id, or its
`updated_at`, which every write of passages or vectors bumps).
"""

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connection, transaction

from knowledge import vector_index
from knowledge.embeddings import embedder, numpy_one_thread
from knowledge.models import Passage

logger = logging.getLogger(__name__)

_lock = threading.Lock()
# collection id -> (model, stamp, VectorIndex)
_cache: dict[int, tuple] = {}


def nearest(query: str, collection_ids: list[int], *, limit: int, vector=None) -> list[int]:
    """Passage ids nearest to `query` among those collections' passages, nearest first.
    `vector`: the question's embedding when made already (`embed_beside`)."""
    model = embedder()
    if vector is None:
        vector = model.query(query)
    if connection.vendor == "postgresql":
        return _pgvector(vector, model.name, collection_ids, limit)
    return _numpy(vector, model.name, collection_ids, limit)


# Threads that embed questions while the caller runs the full-text search (the model's C
# engine and an embeddings server's HTTP call both release the GIL): a hybrid search then
# costs about the larger of the two instead of their sum.
EMBEDDING_THREADS = 4
_pool: ThreadPoolExecutor | None = None


def embed_beside(query: str) -> Future | None:
    """The question's embedding, started in another thread: a Future of the vector (it
    raises what the model raised), or None when the model must run in the caller's thread
    (`Embedder.callers_thread`: the static embedder): the caller embeds it then."""
    global _pool
    model = embedder()
    if model.callers_thread:
        return None
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(EMBEDDING_THREADS, thread_name_prefix="knowledge-embed")
    return _pool.submit(model.query, query)


# A filter that leaves fewer passages than this is searched exactly (bitmap scan on the
# collection, then distances): exact, and faster than an HNSW walk that must skip the other
# collections' passages.
EXACT_MAX_PASSAGES = 2000


def _pgvector(vector, model_name: str, collection_ids: list[int], limit: int) -> list[int]:
    literal = "[" + ",".join(f"{x:.6f}" for x in vector) + "]"
    ids = list(collection_ids)
    # SET LOCAL lasts for this transaction only.
    with transaction.atomic(), connection.cursor() as cursor:
        if len(vector) == 384 and _at_least(cursor, ids, EXACT_MAX_PASSAGES):
            # The planner estimates `vector_dims(...) = 384` (the index's predicate) at 0.5 %
            # of the rows and, with stale statistics, the collection filter as rare too; it
            # then expects fewer rows than LIMIT and sorts the whole filtered table (~1 s at
            # 200,000 passages). Sorting is what the HNSW index saves, so forbid it here; the
            # iterative scan keeps walking until LIMIT rows pass the collection filter.
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute("SET LOCAL hnsw.ef_search = 100")
            cursor.execute(
                "SELECT id FROM knowledge_passage"
                " WHERE vector_dims(embedding_vec) = 384 AND embedding_model = %s"
                " AND collection_id = ANY(%s)"
                " ORDER BY embedding_vec::vector(384) <=> %s::vector(384) LIMIT %s",
                [model_name, ids, literal, limit],
            )
            found = [row[0] for row in cursor.fetchall()]
            if len(found) >= limit:
                return found
            # The walk gave up short: it visits at most hnsw.max_scan_tuples index entries,
            # and entries of deleted or rolled-back rows (a re-synced document, before
            # VACUUM) count too. The collections hold enough passages: read them exactly.
            logger.info("knowledge: the HNSW walk found %d of %d: exact scan", len(found), limit)
            cursor.execute("SET LOCAL enable_sort = on")
        # Not the index's expression: an exact scan of the collections' passages.
        cursor.execute(
            "SELECT id FROM knowledge_passage"
            " WHERE embedding_model = %s AND collection_id = ANY(%s)"
            " ORDER BY embedding_vec <=> %s::vector LIMIT %s",
            [model_name, ids, literal, limit],
        )
        return [row[0] for row in cursor.fetchall()]


def _at_least(cursor, collection_ids: list[int], count: int) -> bool:
    """Whether those collections hold `count` passages or more (reads at most `count` entries
    of the collection index; a bitmap scan would read all of them first). Called inside the
    search's transaction: the setting stays for it (both searches want a plain index scan)."""
    cursor.execute("SET LOCAL enable_bitmapscan = off")
    cursor.execute(
        "SELECT count(*) FROM (SELECT 1 FROM knowledge_passage"
        " WHERE collection_id = ANY(%s) LIMIT %s) AS s",
        [collection_ids, count],
    )
    return cursor.fetchone()[0] >= count


def _stamp(collection_id: int, model_name: str) -> tuple:
    """What changes whenever the collection's vectors do: its `updated_at` (every write of
    passages or vectors bumps it) and its newest passage id; two indexed lookups."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.updated_at, (SELECT max(p.id) FROM knowledge_passage p"
            " WHERE p.collection_id = c.id) FROM knowledge_collection c WHERE c.id = %s",
            [collection_id],
        )
        row = cursor.fetchone()
    return (str(row[0]), int(row[1] or 0)) if row else ("", 0)


LOAD_BATCH = 2000


def _load(collection_id: int, model_name: str, stamp: tuple):
    """The collection's vectors as a VectorIndex, built batch by batch so the peak stays near
    the int8 matrix itself (a quarter of float32's)."""
    np = numpy_one_thread()

    rows = (
        Passage.objects.filter(
            collection_id=collection_id, embedding_model=model_name, embedding__isnull=False
        )
        .order_by("id")
        .values_list("id", "embedding")
    )
    ids: list[int] = []
    blocks, scale_blocks = [], []
    batch: list[bytes] = []

    def flush() -> None:
        if batch:
            floats = np.frombuffer(b"".join(batch), dtype="<f4").reshape(len(batch), -1)
            block, scales = vector_index.quantise(floats)
            blocks.append(block)
            scale_blocks.append(scales)
            batch.clear()

    width = None
    for pk, data in rows.iterator(chunk_size=LOAD_BATCH):
        data = bytes(data)
        if width is None:
            width = len(data)
        if len(data) != width:
            continue  # a vector of another size (never the case for one model)
        ids.append(pk)
        batch.append(data)
        if len(batch) >= LOAD_BATCH:
            flush()
    flush()
    index = vector_index.build(ids, blocks, scale_blocks, (width or 4) // 4)
    return (model_name, stamp, index)


def collection_index(collection_id: int, model_name: str) -> vector_index.VectorIndex:
    """The index of a collection's vectors of `model_name`, cached per process."""
    stamp = _stamp(collection_id, model_name)
    with _lock:
        held = _cache.get(collection_id)
        if held is not None and held[0] == model_name and held[1] == stamp:
            return held[2]
    loaded = _load(collection_id, model_name, stamp)
    with _lock:
        _cache[collection_id] = loaded
    return loaded[2]


def _numpy(vector, model_name: str, collection_ids: list[int], limit: int) -> list[int]:
    np = numpy_one_thread()

    best_ids: list = []
    best_scores: list = []
    for collection_id in collection_ids:
        ids, scores = vector_index.search(
            collection_index(collection_id, model_name), vector, limit
        )
        best_ids.append(ids)
        best_scores.append(scores)
    if not best_ids:
        return []
    ids = np.concatenate(best_ids)
    scores = np.concatenate(best_scores)
    order = np.argsort(-scores, kind="stable")[:limit]
    return [int(i) for i in ids[order]]


def forget() -> None:
    """Drop the per-process matrices (tests, after a bulk change)."""
    with _lock:
        _cache.clear()
