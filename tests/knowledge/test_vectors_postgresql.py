"""pgvector's HNSW index answers a filtered vector search (knowledge.vectors): the plan of
the statements `vector_search` sends names the index even when the planner has no
statistics for the table (a bulk load before autovacuum's ANALYZE: the plan it chose then
sorted every passage, ~1 s at 200,000), and a small collection is searched exactly. Only
the collection ids given are ever read."""

import numpy as np
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from knowledge import vectors
from knowledge.embeddings import LOCAL_MODEL_NAME, to_bytes
from knowledge.indexing import passage_search_text, write_pgvector
from knowledge.models import Document, Passage
from knowledge.search import vector_search
from knowledge.services import collection_create
from tests.knowledge.helpers import runbooks

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="pgvector's plans"),
]

BIG = vectors.EXACT_MAX_PASSAGES + 500


def big_collection():
    """A collection of BIG passages with distinct random unit vectors of the local model."""
    collection = collection_create(name="Archive", by=None)
    document = Document.objects.create(
        collection=collection, path="bulk.md", source=Document.Source.UPLOAD, state="ready"
    )
    matrix = np.random.default_rng(35).standard_normal((BIG, 384)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    created = Passage.objects.bulk_create(
        Passage(
            document=document,
            collection=collection,
            ordinal=i,
            section=f"Bulk {i}",
            text=f"bulk passage {i}",
            search_text=passage_search_text(f"Bulk {i}", f"bulk passage {i}"),
            token_count=3,
            embedding=to_bytes(row),
            embedding_model=LOCAL_MODEL_NAME,
        )
        for i, row in enumerate(matrix)
    )
    write_pgvector([(p.pk, p.embedding) for p in created])
    return collection


def plan_of_search(query, collection_ids):
    """EXPLAIN of the SELECT that vector_search sends, replayed after its SET LOCALs in one
    transaction, with the table's statistics removed (rolled back with the test)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'knowledge_passage'::regclass")
    with CaptureQueriesContext(connection) as captured:
        found = vector_search(query, collection_ids)
    statements = [q["sql"] for q in captured.captured_queries]
    select = next(s for s in statements if "ORDER BY embedding_vec" in s)
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in statements:
            if statement.startswith("SET LOCAL"):
                cursor.execute(statement)
        cursor.execute("EXPLAIN " + select)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return found, plan


def test_a_filtered_search_of_a_big_collection_walks_the_hnsw_index():
    small = runbooks()
    big = big_collection()
    found, plan = plan_of_search("how do I free a full disk?", [big.pk])
    assert "knowledge_passage_hnsw" in plan, plan
    assert "Sort" not in plan, plan
    assert len(found) == 50
    assert set(Passage.objects.filter(pk__in=found).values_list("collection", flat=True)) == {
        big.pk
    }
    assert not Passage.objects.filter(pk__in=found, collection=small).exists()


def test_a_small_collection_beside_a_big_one_is_searched_exactly_and_alone():
    small = runbooks()
    big_collection()
    found, plan = plan_of_search("how do I free a full disk?", [small.pk])
    assert "knowledge_passage_hnsw" not in plan, plan
    mine = set(Passage.objects.filter(collection=small).values_list("pk", flat=True))
    assert found and set(found) == mine  # every passage of it, none of the other


def test_an_hnsw_walk_that_gives_up_short_is_completed_by_an_exact_scan():
    # The walk visits at most hnsw.max_scan_tuples entries, those of other collections and
    # dead ones (rows deleted or rolled back before VACUUM) included. Here the question's
    # nearest neighbours all belong to another collection and the walk may visit 1 entry
    # past its first candidates: it comes back short.
    from knowledge.embeddings import embedder

    question = "how do I free a full disk?"
    big = big_collection()
    decoys = collection_create(name="Decoys", by=None)
    document = Document.objects.create(
        collection=decoys, path="near.md", source=Document.Source.UPLOAD, state="ready"
    )
    near = embedder().query(question) + np.random.default_rng(7).normal(0, 0.01, (300, 384))
    near = (near / np.linalg.norm(near, axis=1, keepdims=True)).astype(np.float32)
    created = Passage.objects.bulk_create(
        Passage(
            document=document,
            collection=decoys,
            ordinal=i,
            section="Near",
            text=f"near {i}",
            search_text=passage_search_text("Near", f"near {i}"),
            token_count=2,
            embedding=to_bytes(row),
            embedding_model=LOCAL_MODEL_NAME,
        )
        for i, row in enumerate(near)
    )
    write_pgvector([(p.pk, p.embedding) for p in created])
    with connection.cursor() as cursor:
        cursor.execute("SET hnsw.max_scan_tuples = 1")
    try:
        with CaptureQueriesContext(connection) as captured:
            found = vector_search(question, [big.pk])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET hnsw.max_scan_tuples")
    walks = [q["sql"] for q in captured.captured_queries if "vector(384) <=>" in q["sql"]]
    assert walks, "the HNSW walk was not tried"
    assert len(found) == 50 and len(set(found)) == 50
    assert set(Passage.objects.filter(pk__in=found).values_list("collection", flat=True)) == {
        big.pk
    }
