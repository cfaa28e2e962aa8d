"""Hybrid retrieval on this database: ranked full-text (FTS5 bm25 / ts_rank_cd), vectors
(numpy int8 / pgvector), fused by reciprocal rank fusion; English and Chinese."""

import pytest
from django.db import connection

from knowledge.models import Passage
from knowledge.search import fulltext_search, fuse, hybrid_search, query_terms, vector_search
from knowledge.vectors import forget
from tests.knowledge.helpers import add_document, runbooks

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_vector_cache():
    forget()
    yield
    forget()


def sections(ids):
    by_id = Passage.objects.in_bulk(ids)
    return [by_id[i].section for i in ids]


def test_full_text_ranks_the_section_that_answers_first():
    collection = runbooks()
    ranked = sections(fulltext_search("rotated logs full disk", [collection.pk]))
    assert ranked[0] == "On-call runbook › Disk › Full disk"


def test_chinese_questions_find_the_chinese_section_by_full_text_and_vectors():
    collection = runbooks()
    assert sections(fulltext_search("磁盘满了怎么办", [collection.pk]))[0] == "运维手册 › 磁盘已满"
    assert sections(vector_search("硬盘空间不够了怎么处理", [collection.pk]))[0] in (
        "运维手册 › 磁盘已满",
        "On-call runbook › Disk › Full disk",
    )


def test_vectors_find_a_paraphrase_that_shares_no_word():
    collection = runbooks()
    nearest = sections(vector_search("no free space left on the drive", [collection.pk]))
    assert {"On-call runbook › Disk › Full disk", "运维手册 › 磁盘已满"} & set(nearest[:2])
    assert fulltext_search("no free space left on the drive", [collection.pk]) == []


def test_hybrid_fuses_both_rankings_and_reports_each_rank():
    collection = runbooks()
    hits = hybrid_search("certificate expiry renewal", [collection.pk], limit=3)
    assert sections([hits[0].passage_id])[0] in (
        "On-call runbook › Certificates",
        "运维手册 › 证书续期",
    )
    assert hits[0].vector_rank is not None
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_search_stays_inside_the_collections_it_is_given():
    runbooks_collection = runbooks()
    other = runbooks(name="Other")
    add_document(other, "notes.md", "# Notes\nThe full disk alarm is wired to PagerDuty.")
    ids = [h.passage_id for h in hybrid_search("full disk", [runbooks_collection.pk], limit=20)]
    assert ids and set(
        Passage.objects.filter(pk__in=ids).values_list("collection_id", flat=True)
    ) == {runbooks_collection.pk}
    assert hybrid_search("full disk", []) == []


def test_reciprocal_rank_fusion_rewards_agreement():
    fused = fuse([[1, 2, 3], [3, 1, 4]], k=60)
    assert [pid for pid, _ in fused] == [1, 3, 2, 4]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


def test_questions_lose_stop_words_and_hostile_syntax_is_only_words():
    assert query_terms("What is the fix for a full disk?") == ["fix", "full", "disk"]
    collection = runbooks()
    for hostile in ['"unbalanced', "disk NEAR/2 AND OR (", "'; DROP TABLE x; --", "*"]:
        fulltext_search(hostile, [collection.pk])  # never a syntax error


def test_a_changed_collection_is_searched_fresh_by_the_vector_index():
    collection = runbooks()
    assert vector_search("penguins in antarctica", [collection.pk])
    document = add_document(collection, "zoo.md", "# Zoo\nPenguins live in Antarctica.")
    top = vector_search("penguins in antarctica", [collection.pk])[0]
    assert Passage.objects.get(pk=top).document == document


def test_the_index_this_database_uses():
    collection = runbooks()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM knowledge_passage WHERE collection_id = %s"
                " AND embedding_vec IS NOT NULL",
                [collection.pk],
            )
        else:
            cursor.execute("SELECT count(*) FROM knowledge_passage_fts")
        assert cursor.fetchone()[0] == Passage.objects.filter(collection=collection).count()


def test_a_hybrid_search_embeds_the_question_while_its_full_text_search_runs(monkeypatch):
    """The question's embedding (tens of ms with the offline model) is made in another thread
    beside the full-text search, not after it: the full-text search here waits until the
    embedding has started, which a search doing one after the other never lets happen."""
    import threading

    from knowledge import search
    from knowledge.embeddings import embedder

    collection = runbooks()
    model = embedder()
    real_query, real_fulltext = model.query, search.fulltext_search
    embedding_started = threading.Event()
    threads = []

    def query(text):
        threads.append(threading.current_thread())
        embedding_started.set()
        return real_query(text)

    def fulltext(*args, **kwargs):
        assert embedding_started.wait(10), "the question was not being embedded meanwhile"
        return real_fulltext(*args, **kwargs)

    monkeypatch.setattr(model, "query", query)
    monkeypatch.setattr(search, "fulltext_search", fulltext)
    hits = hybrid_search("rotated logs full disk", [collection.pk], limit=3)
    assert sections([hits[0].passage_id])[0] == "On-call runbook › Disk › Full disk"
    assert hits[0].fulltext_rank is not None and hits[0].vector_rank is not None
    assert threads and threads[0] is not threading.current_thread()


def test_an_embedder_that_reads_the_database_embeds_in_the_callers_thread(monkeypatch):
    """The static embedder reads its word table through the caller's connection (in a test,
    its transaction): its questions are never embedded in another thread."""
    import threading

    from knowledge.embeddings import embedder

    collection = runbooks()
    model = embedder()
    real_query = model.query
    threads = []

    def query(text):
        threads.append(threading.current_thread())
        return real_query(text)

    monkeypatch.setattr(model, "query", query)
    monkeypatch.setattr(model, "callers_thread", True)
    assert hybrid_search("rotated logs full disk", [collection.pk], limit=3)
    assert threads == [threading.current_thread()]


def test_a_failed_embedding_beside_the_full_text_search_leaves_its_results(monkeypatch):
    from knowledge.embeddings import EmbeddingsUnavailable, embedder

    collection = runbooks()

    def broken(text):
        raise EmbeddingsUnavailable("the embeddings server answered 503")

    monkeypatch.setattr(embedder(), "query", broken)
    hits = hybrid_search("rotated logs full disk", [collection.pk], limit=3)
    assert hits and all(h.vector_rank is None for h in hits)
    assert sections([hits[0].passage_id])[0] == "On-call runbook › Disk › Full disk"
