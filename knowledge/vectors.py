"""Nearest passages to a question's embedding.

PostgreSQL: pgvector's cosine distance, through the HNSW index for 384-dimension vectors
(iterative scans keep the collection filter from starving the result), exact otherwise.

SQLite: this Python's sqlite3 may not load extensions (no sqlite-vec), so an embedded index:
each collection's vectors of the current model, quantised to int8 (a quarter of float32's
memory; recall loss measured in docs/BENCHMARKS.md), held per process and scored by numpy
in chunks. A collection's matrix is rebuilt when its passages change (their count or newest
id differ: passages are only ever inserted or deleted, never updated in place).
"""

import threading

from django.db import connection, transaction

from knowledge.embeddings import embedder
from knowledge.models import Passage

# Rows converted to float32 and scored at a time: small enough to stay in the CPU cache (int8
# then scores as fast as float32, measured in bench/knowledge_vectors_bench.py).
CHUNK_ROWS = 4096
_lock = threading.Lock()
# collection id -> (model, count, max id, ids array, int8 matrix, scales)
_cache: dict[int, tuple] = {}


def nearest(query: str, collection_ids: list[int], *, limit: int) -> list[int]:
    """Passage ids nearest to `query` among those collections' passages, nearest first."""
    model = embedder()
    vector = model.query(query)
    if connection.vendor == "postgresql":
        return _pgvector(vector, model.name, collection_ids, limit)
    return _numpy(vector, model.name, collection_ids, limit)


def _pgvector(vector, model_name: str, collection_ids: list[int], limit: int) -> list[int]:
    literal = "[" + ",".join(f"{x:.6f}" for x in vector) + "]"
    dims = len(vector)
    # SET LOCAL lasts for this transaction only.
    with transaction.atomic(), connection.cursor() as cursor:
        if dims == 384:
            cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cursor.execute("SET LOCAL hnsw.ef_search = 100")
            cursor.execute(
                "SELECT id FROM knowledge_passage"
                " WHERE vector_dims(embedding_vec) = 384 AND embedding_model = %s"
                " AND collection_id = ANY(%s)"
                " ORDER BY embedding_vec::vector(384) <=> %s::vector(384) LIMIT %s",
                [model_name, list(collection_ids), literal, limit],
            )
        else:
            cursor.execute(
                "SELECT id FROM knowledge_passage"
                " WHERE embedding_model = %s AND collection_id = ANY(%s)"
                " ORDER BY embedding_vec <=> %s::vector LIMIT %s",
                [model_name, list(collection_ids), literal, limit],
            )
        return [row[0] for row in cursor.fetchall()]


def _stamp(collection_id: int, model_name: str) -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), coalesce(max(id), 0) FROM knowledge_passage"
            " WHERE collection_id = %s AND embedding_model = %s",
            [collection_id, model_name],
        )
        count, newest = cursor.fetchone()
    return int(count), int(newest)


def _load(collection_id: int, model_name: str, stamp: tuple[int, int]):
    import numpy as np

    rows = Passage.objects.filter(
        collection_id=collection_id, embedding_model=model_name, embedding__isnull=False
    ).values_list("id", "embedding")
    ids, vectors = [], []
    for pk, data in rows.iterator(chunk_size=2000):
        ids.append(pk)
        vectors.append(np.frombuffer(bytes(data), dtype="<f4"))
    if not vectors:
        return (model_name, *stamp, np.zeros(0, np.int64), np.zeros((0, 1), np.int8))
    matrix = np.vstack(vectors)
    # Vectors are unit length: components lie in [-1, 1]; 127 levels each.
    quantised = np.clip(np.rint(matrix * 127.0), -127, 127).astype(np.int8)
    return (model_name, *stamp, np.asarray(ids, dtype=np.int64), quantised)


def collection_matrix(collection_id: int, model_name: str):
    """(ids, int8 matrix) of a collection's vectors of `model_name`, cached per process."""
    stamp = _stamp(collection_id, model_name)
    with _lock:
        held = _cache.get(collection_id)
        if held is not None and held[0] == model_name and (held[1], held[2]) == stamp:
            return held[3], held[4]
    loaded = _load(collection_id, model_name, stamp)
    with _lock:
        _cache[collection_id] = loaded
    return loaded[3], loaded[4]


def _numpy(vector, model_name: str, collection_ids: list[int], limit: int) -> list[int]:
    import numpy as np

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
