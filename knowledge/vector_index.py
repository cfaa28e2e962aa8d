"""The SQLite side's in-memory vector index, numpy only (no Django: bench/ measures it as is).

A collection's vectors are held twice, both small:

- **int8 with a scale per row**: each row divided by its largest component's size, times
  127. A unit vector of 384 dimensions has components near ±0.05, so the former fixed ×127
  used ~4 bits of the 8 (recall@10 0.908 against float32); a scale per row uses all of them
  (measured in bench/knowledge_vectors_bench.py). A quarter of float32's memory.
- **binary codes**: one sign bit per dimension of the row minus the collection's mean
  vector (48 bytes for 384 dimensions). Embeddings share a common direction (every cosine is
  high), which would make most sign bits alike; ranking by q·(x − mean) is the same as by q·x
  for one query, so centring loses nothing.

A search of a big collection counts differing bits (XOR and `np.bitwise_count`, numpy ≥ 2)
between the question's code and every row's, keeps the `candidates` nearest rows and scores
only those with the int8 rows; a small collection is scored exactly with the int8 rows.
"""

from dataclasses import dataclass

from knowledge.embeddings import numpy_one_thread

# Rows scored or compared at a time: small enough to stay in the CPU cache.
CHUNK_ROWS = 4096
CODE_CHUNK_ROWS = 16384
# Collections with fewer vectors are scored exactly (a few ms); above, binary codes pick
# CANDIDATES rows that the int8 rows rescore.
BINARY_MIN_ROWS = 10_000
CANDIDATES = 2000


@dataclass(frozen=True)
class VectorIndex:
    ids: object  # int64 (n,)
    matrix: object  # int8 (n, d)
    scales: object  # float32 (n,): row i ≈ matrix[i] * scales[i]
    mean: object  # float32 (d,)
    codes: object  # uint64 (ceil(d / 64), n): sign bits of row - mean, a word's column a row

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dimensions(self) -> int:
        return self.matrix.shape[1]


def quantise(floats):
    """(int8 rows, float32 scales) of float rows: each row to ±127 at its largest component."""
    np = numpy_one_thread()

    floats = np.asarray(floats, dtype=np.float32)
    peak = np.abs(floats).max(axis=1)
    peak[peak == 0] = 1.0
    scales = (peak / 127.0).astype(np.float32)
    rows = np.clip(np.rint(floats / scales[:, None]), -127, 127).astype(np.int8)
    return rows, scales


def _pack(centred):
    """Sign bits of float rows as (n, words) uint64, padded with zero bits."""
    np = numpy_one_thread()

    bits = np.packbits(centred > 0, axis=1)
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


def _columns(words):
    """(n, words) codes stored word by word: each XOR and bit count runs over one
    contiguous array (a short row per passage made numpy's sum over it ~3× slower)."""
    np = numpy_one_thread()

    return np.ascontiguousarray(words.T)


def build(ids, blocks: list, scale_blocks: list, dimensions: int) -> VectorIndex:
    """The index of int8 blocks (as `quantise` made them) and their rows' ids."""
    np = numpy_one_thread()

    if not blocks:
        empty = np.zeros((0, dimensions), np.int8)
        return VectorIndex(
            np.zeros(0, np.int64), empty, np.zeros(0, np.float32),
            np.zeros(dimensions, np.float32), _columns(_pack(empty.astype(np.float32))),
        )  # fmt: skip
    matrix = np.concatenate(blocks)
    scales = np.concatenate(scale_blocks).astype(np.float32)
    total = np.zeros(dimensions, np.float64)
    for start in range(0, len(matrix), CHUNK_ROWS):
        block = matrix[start : start + CHUNK_ROWS].astype(np.float32)
        total += (block * scales[start : start + CHUNK_ROWS, None]).sum(axis=0)
    mean = (total / len(matrix)).astype(np.float32)
    codes = []
    for start in range(0, len(matrix), CHUNK_ROWS):
        block = matrix[start : start + CHUNK_ROWS].astype(np.float32)
        codes.append(_pack(block * scales[start : start + CHUNK_ROWS, None] - mean))
    codes = _columns(np.concatenate(codes))
    return VectorIndex(np.asarray(ids, dtype=np.int64), matrix, scales, mean, codes)


def _exact(index: VectorIndex, query, limit: int):
    """(row numbers, scores) of the best `limit` rows, every row scored."""
    np = numpy_one_thread()

    rows, scores = [], []
    for start in range(0, len(index), CHUNK_ROWS):
        block = index.matrix[start : start + CHUNK_ROWS].astype(np.float32)
        part = (block @ query) * index.scales[start : start + CHUNK_ROWS]
        take = min(limit, len(part))
        top = np.argpartition(-part, take - 1)[:take]
        rows.append(top + start)
        scores.append(part[top])
    return np.concatenate(rows), np.concatenate(scores)


def hamming_candidates(index: VectorIndex, query, count: int):
    """Row numbers (ascending) of at least `count` rows whose codes differ least from the
    question's: every row at the smallest distance that reaches `count` (distances are at
    most the dimensions, so a histogram finds it; argpartition took ~5 ms at 200,000)."""
    np = numpy_one_thread()

    code = _pack((np.asarray(query, np.float32) - index.mean)[None, :])[0]
    size = len(index)
    distances = np.zeros(size, np.uint16)
    word = np.empty(size, np.uint64)
    bits = np.empty(size, np.uint8)
    for column, value in zip(index.codes, code, strict=True):
        np.bitwise_xor(column, value, out=word)
        np.bitwise_count(word, out=bits)
        distances += bits
    if count >= size:
        return np.arange(size)
    reach = np.cumsum(np.bincount(distances))
    limit = int(np.searchsorted(reach, count))
    return np.flatnonzero(distances <= limit)


def search(index: VectorIndex, query, limit: int, *, candidates: int | None = None):
    """(ids, scores) of the index's best `limit` rows for a unit `query`, best first.
    `candidates`: rows the binary codes keep for rescoring (None: CANDIDATES when the index
    has BINARY_MIN_ROWS rows or more, else every row is scored)."""
    np = numpy_one_thread()

    query = np.asarray(query, dtype=np.float32)
    if len(index) == 0 or index.dimensions != query.shape[0] or limit <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if candidates is None and len(index) >= BINARY_MIN_ROWS:
        candidates = CANDIDATES
    if candidates is None or candidates >= len(index):
        rows, scores = _exact(index, query, limit)
    else:
        rows = hamming_candidates(index, query, max(candidates, limit))
        scores = (index.matrix[rows].astype(np.float32) @ query) * index.scales[rows]
    order = np.argsort(-scores, kind="stable")[:limit]
    return index.ids[rows[order]], scores[order]
