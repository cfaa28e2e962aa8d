"""Nearest passages to a question's embedding.

PostgreSQL: pgvector's cosine distance, through the HNSW index for 384-dimension vectors
(iterative scans keep the collection filter from starving the result), exact otherwise.

SQLite: this Python's sqlite3 may not load extensions (no sqlite-vec), so an embedded index:
each collection's vectors of the current model, quantised to int8 (a quarter of float32's
memory; recall loss measured in docs/BENCHMARKS.md), held per process and scored by numpy
in chunks. A collection's matrix is rebuilt when its passages change (its newest passage
id, or its `updated_at`, which every write of passages or vectors bumps).
"""

import threading

from django.db import connection, transaction

from knowledge.embeddings import embedder, numpy_one_thread
from knowledge.models import Passage

# Rows converted to float32 and scored at a time: small enough to stay in the CPU cache (int8
# then scores as fast as float32, measured in bench/knowledge_vectors_bench.py).
CHUNK_ROWS = 4096
_lock = threading.Lock()
# collection id -> (model, stamp, ids array, int8 matrix)
_cache: dict[int, tuple] = {}


def nearest(query: str, collection_ids: list[int], *, limit: int) -> list[int]:
    """Passage ids nearest to `query` among those collections' passages, nearest first."""
    model = embedder()
    vector = model.query(query)
    if connection.vendor == "postgresql":
        return _pgvector(vector, model.name, collection_ids, limit)
    return _numpy(vector, model.name, collection_ids, limit)


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
        else:
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
    """The collection's vectors as (ids, int8 matrix), built batch by batch so the peak stays
    near the int8 matrix itself (a quarter of float32's)."""
    np = numpy_one_thread()

    rows = (
        Passage.objects.filter(
            collection_id=collection_id, embedding_model=model_name, embedding__isnull=False
        )
        .order_by("id")
        .values_list("id", "embedding")
    )
    ids: list[int] = []
    blocks = []
    batch: list[bytes] = []

    def flush() -> None:
        if batch:
            floats = np.frombuffer(b"".join(batch), dtype="<f4").reshape(len(batch), -1)
            # Unit vectors: components lie in [-1, 1]; 127 levels each.
            blocks.append(np.clip(np.rint(floats * 127.0), -127, 127).astype(np.int8))
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
    if not blocks:
        return (model_name, stamp, np.zeros(0, np.int64), np.zeros((0, 1), np.int8))
    return (model_name, stamp, np.asarray(ids, dtype=np.int64), np.concatenate(blocks))


def collection_matrix(collection_id: int, model_name: str):
    """(ids, int8 matrix) of a collection's vectors of `model_name`, cached per process."""
    stamp = _stamp(collection_id, model_name)
    with _lock:
        held = _cache.get(collection_id)
        if held is not None and held[0] == model_name and held[1] == stamp:
            return held[2], held[3]
    loaded = _load(collection_id, model_name, stamp)
    with _lock:
        _cache[collection_id] = loaded
    return loaded[2], loaded[3]


def _numpy(vector, model_name: str, collection_ids: list[int], limit: int) -> list[int]:
    np = numpy_one_thread()

    query = np.asarray(vector, dtype=np.float32)
    best_ids: list = []
    best_scores: list = []
    for collection_id in collection_ids:
        ids, matrix = collection_matrix(collection_id, model_name)
        if len(ids) == 0 or matrix.shape[1] != query.shape[0]:
            continue
        for start in range(0, len(ids), CHUNK_ROWS):
            block = matrix[start : start + CHUNK_ROWS].astype(np.float32)
            scores = block @ query
            take = min(limit, len(scores))
            top = np.argpartition(-scores, take - 1)[:take]
            best_ids.append(ids[start + top])
            best_scores.append(scores[top])
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
