"""The SQLite vector index's choice, measured: exact float32, int8 (the former fixed ×127 and
knowledge.vector_index's scale per row), and binary codes picking candidates that the int8
rows rescore (knowledge.vector_index.search), brute force with numpy at `--rows` passages.

    .venv/bin/python bench/knowledge_vectors_bench.py [--rows 200000] [--queries 100]
        [--candidates 250,500,1000,2000]

Vectors: 384-dimension unit vectors in clusters around a shared direction (a synthetic
stand-in for a corpus's embeddings, whose cosines are all high: 2,000 topics, passages near
their topic), questions near a random passage. Reported: memory of each index, search
p50/p95 (ms, one thread) and recall@10 against the exact float32 top 10.
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as knowledge.embeddings sets it
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from common import machine_info, markdown_table, percentile  # noqa: E402

from knowledge import vector_index  # noqa: E402

CHUNK_ROWS = vector_index.CHUNK_ROWS


def unit(matrix):
    return (matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)).astype(np.float32)


def exact_top(matrix, query, k, scale=None):
    """Top k rows by dot product, chunked (float32 rows, or int8 rows times `scale`)."""
    best_ids, best_scores = [], []
    for start in range(0, len(matrix), CHUNK_ROWS):
        block = matrix[start : start + CHUNK_ROWS]
        scores = (block.astype(np.float32) if block.dtype != np.float32 else block) @ query
        if scale is not None:
            scores = scores * scale
        take = min(k, len(scores))
        idx = np.argpartition(-scores, take - 1)[:take]
        best_ids.append(idx + start)
        best_scores.append(scores[idx])
    ids, scores = np.concatenate(best_ids), np.concatenate(best_scores)
    return ids[np.argsort(-scores)[:k]]


def timed(function, queries) -> tuple[list, list]:
    times, results = [], []
    for query in queries:
        started = time.perf_counter()
        results.append(function(query))
        times.append((time.perf_counter() - started) * 1000)
    return times, results


def recall(found: list, exact: list) -> float:
    pairs = zip(found, exact, strict=True)
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in pairs]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--candidates", default="250,500,1000,2000")
    parser.add_argument("--shared", type=float, default=8.0, help="weight of the shared direction")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    shared = unit(rng.standard_normal(384))
    topics = unit(rng.standard_normal((2000, 384)) + args.shared * shared * np.sqrt(384) / 4)
    data = unit(topics[rng.integers(0, 2000, args.rows)] + 0.6 * unit(
        rng.standard_normal((args.rows, 384))))  # fmt: skip
    picks = rng.integers(0, args.rows, args.queries)
    queries = unit(data[picks] + 0.5 * unit(rng.standard_normal((args.queries, 384))))
    cosine = float((data[:500] @ data[500:1000].T).mean())
    print(f"machine: {machine_info()}; {args.rows:,} vectors, {args.queries} queries; "
          f"mean cosine of two rows {cosine:.2f}")  # fmt: skip

    fixed = np.clip(np.rint(data * 127), -127, 127).astype(np.int8)
    blocks, scales = [], []
    for start in range(0, args.rows, 2000):
        block, scale = vector_index.quantise(data[start : start + 2000])
        blocks.append(block)
        scales.append(scale)
    index = vector_index.build(np.arange(args.rows), blocks, scales, 384)

    exact_times, exact = timed(lambda q: exact_top(data, q, 10), queries)
    rows = [["float32, exact", f"{data.nbytes / 2**20:.0f}",
             f"{percentile(exact_times, 50):.1f}", f"{percentile(exact_times, 95):.1f}",
             "1.000"]]  # fmt: skip
    methods = [
        ("int8 ×127 (before), exact", fixed.nbytes, lambda q: exact_top(fixed, q, 10)),
        (
            "int8 scale per row, exact",
            index.matrix.nbytes + index.scales.nbytes,
            lambda q: vector_index.search(index, q, 10, candidates=args.rows)[0],
        ),
    ]
    for count in (int(c) for c in args.candidates.split(",")):
        methods.append((
            f"binary codes → {count} → int8",
            index.matrix.nbytes + index.scales.nbytes + index.codes.nbytes,
            lambda q, count=count: vector_index.search(index, q, 10, candidates=count)[0],
        ))  # fmt: skip
    for name, size, function in methods:
        times, found = timed(function, queries)
        rows.append([name, f"{size / 2**20:.0f}", f"{percentile(times, 50):.1f}",
                     f"{percentile(times, 95):.1f}", f"{recall(found, exact):.3f}"])  # fmt: skip
    print(markdown_table(["index", "MB", "p50 ms", "p95 ms", "recall@10 vs float32"], rows))
    print(f"binary codes alone: {index.codes.nbytes / 2**20:.1f} MB")


if __name__ == "__main__":
    main()
