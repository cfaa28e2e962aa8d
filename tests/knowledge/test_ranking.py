"""What the hybrid search does with its two rankings (knowledge.search): a heading's words
weigh more than the body's in the full-text ranking on both databases, one section cannot
fill every place, and a question in a script the collection's index never saw (Chinese over
English documents) is searched with its words translated (knowledge.crosslingual), or by
vectors alone without a translation. Passages are written without vectors (the
vector ranking is stubbed), so these run without the embeddings model."""

import pytest

from knowledge import search
from knowledge.indexing import passage_search_text
from knowledge.models import Document, Passage
from knowledge.search import diversify, fulltext_search, hybrid_search, unreadable_script
from knowledge.services import collection_create
from knowledge.splitting import has_cjk

pytestmark = pytest.mark.django_db


def collection_of(passages: list[tuple[str, str]], *, path="manual.md"):
    """A collection of one document whose passages are (section, text), without vectors."""
    collection = collection_create(name=f"C {path}", by=None)
    document = Document.objects.create(
        collection=collection, path=path, source=Document.Source.UPLOAD, state="ready"
    )
    created = Passage.objects.bulk_create(
        Passage(
            document=document,
            collection=collection,
            ordinal=i,
            section=section,
            text=text,
            search_text=passage_search_text(section, text),
            token_count=len(text.split()),
        )
        for i, (section, text) in enumerate(passages)
    )
    return collection, [p.pk for p in created]


FILLER = "Other words about unrelated matters fill this passage to a usual length. " * 3


def test_a_headings_words_outrank_the_same_words_in_a_body():
    collection, (in_heading, in_body) = collection_of(
        [
            ("tool(1) › Rotation schedule", "Logs are kept for a week. " + FILLER),
            ("tool(1) › OPTIONS", "--keep: the rotation and the schedule of rotation. " + FILLER),
        ]
    )
    assert fulltext_search("rotation schedule", [collection.pk])[0] == in_heading


def test_the_heading_weight_is_what_ranks_it(monkeypatch):
    collection, (in_heading, in_body) = collection_of(
        [
            ("tool(1) › Rotation schedule", "Logs are kept for a week. " + FILLER),
            ("tool(1) › OPTIONS", "--keep: the rotation and the schedule of rotation. " + FILLER),
        ]
    )
    monkeypatch.setattr(search, "HEADING_WEIGHT", 1.0)
    monkeypatch.setattr(search, "PG_HEADING_WEIGHT", 1.0)
    assert fulltext_search("rotation schedule", [collection.pk])[0] == in_body


def test_a_passage_without_heading_is_searched_by_its_first_line_too():
    collection, (only,) = collection_of([("", "Penguins live in Antarctica.\nSecond line.")])
    assert passage_search_text("", "Penguins") == "\nPenguins"
    assert fulltext_search("penguins", [collection.pk]) == [only]


def test_changed_and_deleted_passages_leave_the_index():
    collection, (first,) = collection_of([("Notes › Zoo", "Penguins live in Antarctica.")])
    Passage.objects.filter(pk=first).update(
        search_text=passage_search_text("Notes › Zoo", "Walruses live in the Arctic.")
    )
    assert fulltext_search("penguins", [collection.pk]) == []
    assert fulltext_search("zoo walruses", [collection.pk]) == [first]
    Passage.objects.filter(pk=first).delete()
    assert fulltext_search("zoo walruses", [collection.pk]) == []


def test_one_section_takes_one_place_before_other_sections():
    collection, ids = collection_of(
        [("git-push(1) › OPTIONS", f"option {i}") for i in range(4)]
        + [("git-push(1) › DESCRIPTION", "what push does"), ("git-push(1) › NOTES", "notes")]
    )
    ranked = [(pid, 1.0 / n) for n, pid in enumerate(ids, start=1)]
    assert [pid for pid, _ in diversify(ranked, limit=3)] == [ids[0], ids[4], ids[5]]
    # Too few other sections: the held-back passages fill the places, in order.
    assert [pid for pid, _ in diversify(ranked, limit=5)] == [
        ids[0],
        ids[4],
        ids[5],
        ids[1],
        ids[2],
    ]
    assert [pid for pid, _ in diversify(ranked, limit=3, per_section=2)] == [ids[0], ids[1], ids[4]]
    assert [pid for pid, _ in diversify(ranked, limit=3, per_section=0)] == ids[:3]


def test_hybrid_results_are_diversified(monkeypatch):
    collection, ids = collection_of(
        [("git-push(1) › OPTIONS", f"--force option {i}") for i in range(3)]
        + [("git-push(1) › DESCRIPTION", "updates remote refs")]
    )
    monkeypatch.setattr(search, "vector_search", lambda query, ids_, **kw: ids)
    hits = hybrid_search("force push", [collection.pk], limit=2)
    assert [h.passage_id for h in hits] == [ids[0], ids[3]]


def test_a_rare_word_outranks_a_common_one_repeated():
    # bm25 on SQLite; on PostgreSQL ts_rank alone ranked "commit" x 7 first (no document
    # frequencies), now each term's ts_rank is weighed by its rarity.
    passages = [(f"Note {i}", f"A commit note, number {i}, among others.") for i in range(8)]
    passages += [("Commits", "commit commit commit commit commit commit: the commit.")]
    passages += [("Recovery", "The reflog keeps what you lost.")]
    collection, ids = collection_of(passages)
    assert fulltext_search("commit reflog", [collection.pk])[0] == ids[-1]
    assert fulltext_search("commit", [collection.pk])[0] == ids[-2]


def test_the_same_heading_in_two_documents_is_two_sections():
    first, (a1, a2) = collection_of([("OPTIONS", "x"), ("OPTIONS", "y")], path="a.md")
    second, (b1,) = collection_of([("OPTIONS", "z")], path="b.md")
    ranked = [(a1, 0.3), (a2, 0.2), (b1, 0.1)]
    assert [pid for pid, _ in diversify(ranked, limit=3, per_section=1)] == [a1, b1, a2]


def english_manual():
    return collection_of(
        [
            ("git-stash(1) › DESCRIPTION", "Stash: save your changes away, temporary."),
            ("git(1) › DESCRIPTION", "git is a fast, scalable, distributed revision control."),
            ("git-log(1) › DESCRIPTION", "Shows the commit logs of git."),
        ]
    )


def test_a_chinese_question_over_english_passages_is_searched_in_translation(monkeypatch):
    collection, (stash, git, log) = english_manual()
    monkeypatch.setattr(search, "vector_search", lambda query, ids, **kw: [log, git])
    question = "如何临时保存未提交的修改 git？"  # "how to temporarily save uncommitted changes"
    assert unreadable_script(question, [collection.pk])  # only "git" matches as it is
    hits = {h.passage_id: h for h in hybrid_search(question, [collection.pk], limit=3)}
    # 保存 "to save, to keep", 临时 "temporary": the stash passage's words, in English; the
    # vectors missed it.
    assert hits[stash].fulltext_rank == 1 and hits[stash].vector_rank is None


def test_without_a_translation_a_chinese_question_goes_by_vectors(monkeypatch):
    collection, (stash, git, log) = english_manual()
    monkeypatch.setattr(search, "vector_search", lambda query, ids, **kw: [stash, log])
    monkeypatch.setattr(search, "CROSS_LINGUAL_WEIGHT", 0.0)
    question = "如何临时保存未提交的修改 git？"
    assert fulltext_search(question, [collection.pk])  # "git" alone matches
    hits = hybrid_search(question, [collection.pk], limit=3)
    assert [h.passage_id for h in hits] == [stash, log]
    assert all(h.fulltext_rank is None for h in hits)


def test_a_chinese_question_over_chinese_passages_keeps_full_text(monkeypatch):
    collection, (disk, other) = collection_of(
        [("运维手册 › 磁盘已满", "磁盘已满时，删除旧日志。"), ("运维手册 › 证书", "证书续期。")]
    )
    monkeypatch.setattr(search, "vector_search", lambda query, ids, **kw: [other, disk])
    assert not unreadable_script("磁盘满了怎么办", [collection.pk])
    hits = hybrid_search("磁盘满了怎么办", [collection.pk], limit=2)
    assert hits[0].passage_id == disk and hits[0].fulltext_rank == 1


def test_an_english_question_keeps_full_text(monkeypatch):
    collection, (stash, git, log) = english_manual()
    monkeypatch.setattr(search, "vector_search", lambda query, ids, **kw: [log, git])
    assert not unreadable_script("stash my changes", [collection.pk])
    hits = hybrid_search("stash my changes", [collection.pk], limit=3)
    assert stash in [h.passage_id for h in hits]


def test_cjk_is_recognised():
    assert has_cjk("如何 git") and has_cjk("ひらがな") and has_cjk("한국어")
    assert not has_cjk("git stash --include-untracked é")


def test_weighted_fusion():
    fused = search.fuse([[1, 2], [2, 1]], k=60, weights=[0.5, 1.0])
    assert [pid for pid, _ in fused] == [2, 1]
    assert fused[0][1] == pytest.approx(0.5 / 62 + 1 / 61)


def test_the_best_documents_other_sections_are_lifted():
    # Fused: a.md's NAME first, then b.md's passage, then a.md's DESCRIPTION.
    first, (name, description) = collection_of(
        [("git-stash(1) › NAME", "n"), ("git-stash(1) › DESCRIPTION", "d")], path="a.md"
    )
    second, (other,) = collection_of([("git-revert(1) › DESCRIPTION", "r")], path="b.md")
    fused = [(name, 0.05), (other, 0.04), (description, 0.03)]
    sections = search.sections_of([name, other, description])
    boosted = search.document_boost(fused, sections)
    assert [pid for pid, _ in boosted] == [name, description, other]
    assert boosted[1][1] == pytest.approx(0.03 + search.DOCUMENT_WEIGHT * 0.05)


def test_hybrid_search_lifts_the_best_documents_sections(monkeypatch):
    first, (name, description) = collection_of(
        [("git-stash(1) › NAME", "stash"), ("git-stash(1) › DESCRIPTION", "record state")],
        path="a.md",
    )
    second, (other,) = collection_of([("git-revert(1) › DESCRIPTION", "revert")], path="b.md")
    monkeypatch.setattr(search, "fulltext_search", lambda *a, **kw: [name])
    monkeypatch.setattr(search, "vector_search", lambda *a, **kw: [name, other, description])
    lifted = hybrid_search("put away changes", [first.pk, second.pk], limit=2)
    assert [h.passage_id for h in lifted] == [name, description]
    monkeypatch.setattr(search, "DOCUMENT_WEIGHT", 0.0)
    plain = hybrid_search("put away changes", [first.pk, second.pk], limit=2)
    assert [h.passage_id for h in plain] == [name, other]


def test_a_passage_gone_from_the_index_is_not_lifted_by_a_document_of_its_number():
    # Passage 1 is in document 2; passage 2 is gone (no section known): it counts alone,
    # never as one of document 2's passages.
    boosted = dict(search.document_boost([(1, 0.05), (2, 0.04)], {1: (2, "NAME")}))
    assert boosted[1] == pytest.approx(0.05 * (1 + search.DOCUMENT_WEIGHT))
    assert boosted[2] == pytest.approx(0.04 * (1 + search.DOCUMENT_WEIGHT))
