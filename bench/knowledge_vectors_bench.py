"""The SQLite vector index's choice, measured: exact float32 versus int8-quantised vectors
(what knowledge.vectors holds per process), brute force with numpy at `--rows` passages.

    .venv/bin/python bench/knowledge_vectors_bench.py [--rows 200000] [--queries 100]

Vectors: 384-dimension unit vectors in clusters (a synthetic stand-in for a corpus's
embeddings: 2,000 topics, passages near their topic), questions near a random passage.
Reported: memory of each matrix, search p50/p95 (ms, one thread, chunks of
knowledge.vectors.CHUNK_ROWS), and the int8 index's recall@10 against the exact float32
top 10.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, markdown_table, percentile  # noqa: E402

CHUNK_ROWS = 4096  # as knowledge.vectors (--chunk-rows to try others)


def unit(matrix):
    return (matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)).astype(np.float32)


def top(matrix, query, k, quantised: bool):
    best_ids, best_scores = [], []
    for start in range(0, len(matrix), CHUNK_ROWS):
        block = matrix[start : start + CHUNK_ROWS]
        scores = (block.astype(np.float32) if quantised else block) @ query
        take = min(k, len(scores))
        idx = np.argpartition(-scores, take - 1)[:take]
        best_ids.append(idx + start)
        best_scores.append(scores[idx])
    ids, scores = np.concatenate(best_ids), np.concatenate(best_scores)
    return ids[np.argsort(-scores)[:k]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS)
    args = parser.parse_args()
    global CHUNK_ROWS
    CHUNK_ROWS = args.chunk_rows
    rng = np.random.default_rng(1)
    topics = unit(rng.standard_normal((2000, 384)))
    data = unit(topics[rng.integers(0, 2000, args.rows)] + 0.6 * unit(
        rng.standard_normal((args.rows, 384))))  # fmt: skip
    quantised = np.clip(np.rint(data * 127), -127, 127).astype(np.int8)
    picks = rng.integers(0, args.rows, args.queries)
    queries = unit(data[picks] + 0.5 * unit(rng.standard_normal((args.queries, 384))))
    rows, recalls = [], []
    for name, matrix, is_q in (("float32", data, False), ("int8", quantised, True)):
        times = []
        for query in queries:
            started = time.perf_counter()
            top(matrix, query, 10, is_q)
            times.append((time.perf_counter() - started) * 1000)
        rows.append([name, f"{matrix.nbytes / 2**20:.0f}", f"{percentile(times, 50):.1f}",
                     f"{percentile(times, 95):.1f}"])  # fmt: skip
    for query in queries:
        exact = set(top(data, query, 10, False))
        recalls.append(len(exact & set(top(quantised, query, 10, True))) / 10)
    print(f"machine: {machine_info()}; {args.rows:,} vectors, {args.queries} queries")
    print(markdown_table(["vectors", "MB", "p50 ms", "p95 ms"], rows))
    print(f"int8 recall@10 against exact float32: {np.mean(recalls):.3f}")


if __name__ == "__main__":
    main()
