"""The SQLite side's vector index (knowledge.vector_index): int8 rows with a scale each, and
binary codes that pick the candidates a big collection's search rescores. Checked against an
exact float32 search on small sets; the recall at 200,000 rows is measured in
bench/knowledge_vectors_bench.py."""

import numpy as np
import pytest

from knowledge import vector_index, vectors
from knowledge.models import Passage
from knowledge.search import vector_search
from tests.knowledge.helpers import runbooks


def unit(matrix):
    return (matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)).astype(np.float32)


def clustered(rows: int, seed: int = 35):
    """Unit vectors around a shared direction (as embeddings are: every cosine is high), in
    100 topics; and 20 questions near some of them."""
    rng = np.random.default_rng(seed)
    shared = unit(rng.standard_normal(384)) * 40
    topics = unit(rng.standard_normal((100, 384)) * 1.0 + shared)
    data = unit(topics[rng.integers(0, 100, rows)] + 0.6 * unit(rng.standard_normal((rows, 384))))
    questions = unit(data[rng.integers(0, rows, 20)] + 0.3 * unit(rng.standard_normal((20, 384))))
    return data, questions


def index_of(data, batch: int = 700):
    blocks, scales = [], []
    for start in range(0, len(data), batch):
        block, scale = vector_index.quantise(data[start : start + batch])
        blocks.append(block)
        scales.append(scale)
    return vector_index.build(np.arange(len(data)) + 1000, blocks, scales, data.shape[1])


def exact_top(data, question, k):
    return list(np.argsort(-(data @ question), kind="stable")[:k] + 1000)


def test_int8_rows_keep_each_rows_scale():
    data, _ = clustered(50)
    rows, scales = vector_index.quantise(data)
    assert rows.dtype == np.int8 and np.abs(rows).max(axis=1).min() == 127
    error = np.abs(rows.astype(np.float32) * scales[:, None] - data)
    assert (error <= scales[:, None] / 2 + 1e-7).all()


def test_binary_candidates_then_rescoring_return_the_exact_top_results():
    """The same top 10 as scoring every int8 row, and nearly float32's (int8 rounding may
    swap near ties: recall@10 ≥ 0.95)."""
    data, questions = clustered(5000)
    index = index_of(data)
    assert index.codes.shape == (6, 5000)
    overlap = []
    for question in questions:
        ids, scores = vector_index.search(index, question, 10, candidates=300)
        every_row, _ = vector_index.search(index, question, 10, candidates=len(data))
        assert list(ids) == list(every_row)
        assert (np.diff(scores) <= 0).all()
        overlap.append(len(set(ids) & set(exact_top(data, question, 10))) / 10)
    assert np.mean(overlap) >= 0.95, overlap


def test_the_codes_are_centred_on_the_collections_mean():
    """Without centring every row's signs would follow the shared direction and the
    candidates would be nearly arbitrary; the nearest row must be among few candidates."""
    data, questions = clustered(5000)
    index = index_of(data)
    assert np.linalg.norm(index.mean) > 0.5  # the shared direction
    for question in questions:
        nearest = int(np.argmax(data @ question))
        assert nearest in set(vector_index.hamming_candidates(index, question, 50))


def test_a_small_index_is_scored_exactly_and_an_empty_one_finds_nothing():
    data, questions = clustered(300)
    index = index_of(data)
    ids, _ = vector_index.search(index, questions[0], 10)
    assert list(ids) == list(vector_index.search(index, questions[0], 10, candidates=300)[0])
    assert len(set(ids) & set(exact_top(data, questions[0], 10))) >= 9
    empty = vector_index.build([], [], [], 384)
    assert len(vector_index.search(empty, questions[0], 10)[0]) == 0


@pytest.mark.django_db
def test_vector_search_through_the_binary_codes_finds_the_paraphrase(monkeypatch):
    """The collection's search through codes and rescoring (forced on a small collection)."""
    monkeypatch.setattr(vector_index, "BINARY_MIN_ROWS", 1)
    monkeypatch.setattr(vector_index, "CANDIDATES", 3)
    vectors.forget()
    collection = runbooks()
    found = vector_search("no free space left on the drive", [collection.pk], limit=2)
    sections = set(Passage.objects.filter(pk__in=found).values_list("section", flat=True))
    assert {"On-call runbook › Disk › Full disk", "运维手册 › 磁盘已满"} & sections
    vectors.forget()
