"""Full-text search leaves out the terms a big share of passages hold (knowledge.term_stats):
rare terms are kept, and a question of common words only still finds the passage that holds
them all. On this database (FTS5's MATCH, PostgreSQL's GIN index)."""

import pytest
from django.db import connection

from knowledge import term_stats
from knowledge.models import Document, Passage
from knowledge.search import fulltext_search
from knowledge.services import collection_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_limits(monkeypatch):
    """A budget of 5 passages, so that a handful of passages shows the rule."""
    monkeypatch.setattr(term_stats, "SCORED_PASSAGES", 5)
    monkeypatch.setattr(term_stats, "SCORED_PASSAGES_POSTGRESQL", 5)


def archive(texts: list[str], name: str = "Archive"):
    """A collection whose passages are `texts` (full-text only: no vectors needed)."""
    from knowledge.indexing import passage_search_text

    collection = collection_create(name=name, by=None)
    document = Document.objects.create(
        collection=collection, path="a.md", source=Document.Source.UPLOAD, state="ready"
    )
    created = Passage.objects.bulk_create(
        Passage(
            document=document,
            collection=collection,
            ordinal=i,
            section=f"Part {i}",
            text=text,
            search_text=passage_search_text("", text),
        )
        for i, text in enumerate(texts)
    )
    if connection.vendor == "postgresql":  # its counts are the planner's statistics
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE knowledge_passage")
        term_stats.forget()
    return collection, [p.pk for p in created]


FILLER = [f"the server logs an error number {n} on the disk" for n in range(20)]


def test_common_terms_are_left_out_when_a_rarer_one_exists(small_limits):
    collection, ids = archive([*FILLER, "penguins crowd the server room", "a quiet disk"])
    selection = term_stats.select_terms(["server", "error", "penguins"])
    assert selection.terms == ["penguins"]
    assert not selection.require_all
    assert fulltext_search("server error penguins", [collection.pk]) == [ids[20]]


def test_a_question_of_common_words_only_finds_the_passage_holding_them_all(small_limits):
    collection, ids = archive([*FILLER, "a disk full of error logs"])
    # "disk", "error" and "logs" are each in 21 passages: all required, not any.
    selection = term_stats.select_terms(["disk", "error"])
    assert selection.require_all and selection.terms == ["disk", "error"]
    found = fulltext_search("disk error", [collection.pk])
    # Every passage holds both (PostgreSQL ranks at most the budget's 5 of them).
    assert found and set(found) <= set(ids)
    assert fulltext_search("quiet disk", [collection.pk]) == []  # "quiet" in none: kept, alone
    pair, pair_ids = archive(["error", "disk", "a full disk, an error"], name="Pair")
    assert fulltext_search("error disk", [pair.pk]) == [pair_ids[2]]
    # No passage of this collection holds both: any of them answers, as without pruning.
    only, only_ids = archive(["error", "disk", "nothing here"], name="Other")
    assert sorted(fulltext_search("error disk", [only.pk])) == only_ids[:2]


def test_the_rarest_terms_are_kept_while_their_passages_fit_the_budget(small_limits):
    collection, ids = archive(
        ["kiwi", "mango kiwi", "mango", "mango", "lime", "lime", "lime", "lime", *FILLER]
    )
    # kiwi: 2 passages, mango: 3, lime: 4; the budget is 5.
    assert term_stats.select_terms(["lime", "mango", "kiwi"]).terms == ["mango", "kiwi"]
    assert set(fulltext_search("lime mango kiwi", [collection.pk])) == set(ids[:4])


def test_counts_go_through_the_index_stemmer(small_limits):
    archive([f"servers {n}" for n in range(10)])
    counts = term_stats.term_counts(["server", "servers", "nothing", "the"], 100)
    assert counts["server"] == counts["servers"] == 10
    assert counts["nothing"] < 10 and counts["the"] == 0  # a stop word: no lexeme


def test_a_small_index_prunes_nothing():
    collection, ids = archive([*FILLER, "penguins crowd the server room"])
    assert term_stats.select_terms(["server", "penguins"]).terms == ["server", "penguins"]
    assert len(fulltext_search("server penguins", [collection.pk])) == 21
