"""A static embedder: a text's vector is the weighted mean of its words' vectors, each word
embedded once by the offline model (KNOWLEDGE_EMBEDDINGS_LOCAL=static).

Why: multilingual-e5-small reads every passage through 12 layers, ~1.6 passages/s on one
core of this machine, far from the 100/s a collection's indexing needs; a question costs
16-24 ms. Here the transformer only ever reads single words, once each per model: a passage
then costs a lookup and a weighted mean (thousands per second), a question ~0.1 ms when its
words are known. The price is word order and context (figures in docs/BENCHMARKS.md).

- Words: what the full-text index reads (knowledge.splitting.search_form, lower-cased `\\w+`):
  English words, numbers, CJK as overlapping character bigrams (a lone character itself).
  Words longer than MAX_WORD_CHARS (hashes, base64) are left out.
- A word's vector: the offline model's `passage: <word>` embedding, kept in the database
  (knowledge.models.WordVector, keyed by the word model's name and the word): the first
  process that meets a word embeds it, every other reads it; a bounded per-process cache in
  front of it.
- Weights: smooth inverse frequency (SIF, a / (a + p(word))), p from the word's rank in
  cl100k (a BPE vocabulary is built roughly in order of frequency; a word that is not one
  token counts as rare), times the square root of the word's count in the text: common words
  weigh little, a word repeated ten times does not drown the others.
- Centred: every word vector of this model shares a large common part (any two passages'
  vectors had a cosine of ~0.99, which the int8 matrices of knowledge.vectors cannot tell
  apart), so the mean of REFERENCE_WORDS' vectors (the common English words among cl100k's
  first 3,000 tokens: a fixed list, the same centre in every process) is subtracted.
- Questions are embedded the same way (the same word vectors): measured better than e5's
  own question vector against these passages.

No Django at import beyond the models; numpy is imported when the first text is embedded,
by the processes that index or answer only (knowledge.embeddings loads this module lazily).
"""

import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable

from chats.agent.tokens import decode, encode
from knowledge.models import WordVector
from knowledge.splitting import search_form

DIMENSIONS = 384
MAX_WORD_CHARS = 40
# Words held per process (float16: ~0.8 KB each with the dict's share).
WORDS_HELD = 100_000
# Words looked up in, or written to, the database per statement.
DB_BATCH = 500
# Words given to the model per call.
EMBED_BATCH = 256
# SIF: a / (a + p); p from a Zipf law over cl100k's ranks.
SIF_A = 1e-4
CL100K_SIZE = 100_000

_WORD = re.compile(r"\w+")
_REFERENCE = re.compile(r" [a-z]{3,}")
REFERENCE_TOKENS = 3000


def reference_words() -> list[str]:
    """The words whose mean vector is the centre: cl100k's tokens among its first
    REFERENCE_TOKENS that are a space and 3+ lower-case letters (561 words)."""
    found = (decode([token]) for token in range(REFERENCE_TOKENS))
    return [text[1:] for text in found if _REFERENCE.fullmatch(text)]


def words(text: str) -> list[str]:
    """The words of `text` as this embedder reads them, in order, repeated as they occur."""
    return [w for w in _WORD.findall(search_form(text).lower()) if len(w) <= MAX_WORD_CHARS]


def word_weight(word: str) -> float:
    """SIF weight of `word`: near 0 for the commonest words, near 1 for rare ones."""
    tokens = encode(" " + word)
    rank = tokens[0] if len(tokens) == 1 else CL100K_SIZE * len(tokens)
    frequency = 1.0 / ((rank + 10) * math.log(CL100K_SIZE))
    return SIF_A / (SIF_A + frequency)


class StaticEmbedder:
    """Texts into vectors from their words' vectors. `embed_words` gives the word model's
    vectors for a list of words (called only for words no process has embedded yet);
    `word_model` names it (the key of its words in the database), `name` the recipe and
    word model together (knowledge.embeddings.STATIC_MODEL_NAME)."""

    def __init__(self, *, name: str, word_model: str, embed_words: Callable[[list[str]], object]):
        self.name = name
        self.word_model = word_model
        self._embed_words = embed_words
        self._held: OrderedDict[str, tuple] = OrderedDict()  # word -> (vector f16, weight)
        self._lock = threading.Lock()
        self.embedded = 0  # words this process gave the model (benchmarks, tests)
        self._centre = None

    def embed(self, texts: list[str]):
        """(n, 384) float32, one row per text, not normalised (the caller normalises). A text
        without words gets a fixed vector, never zeros (a zero vector has no cosine)."""
        import numpy as np

        centre = self.centre()
        counted = [Counter(words(text)) for text in texts]
        known = self._vectors({w for counts in counted for w in counts})
        # One matrix product per batch: (texts x words) weights times (words x 384).
        columns = {word: index for index, word in enumerate(known)}
        matrix = np.stack([vector for vector, _weight in known.values()] or [centre])
        weights = np.zeros((len(texts), len(matrix)), dtype=np.float32)
        for row, counts in enumerate(counted):
            for word, count in counts.items():
                weights[row, columns[word]] = known[word][1] * math.sqrt(count)
        totals = weights.sum(axis=1)
        out = (weights @ matrix.astype(np.float32)) / np.maximum(totals, 1e-12)[:, None] - centre
        out[totals == 0] = 1.0
        return out

    def centre(self):
        """The mean of the reference words' vectors (as stored: float16, so every process
        computes the same centre)."""
        import numpy as np

        if self._centre is None:
            known = self._vectors(set(reference_words()))
            matrix = np.stack([vector for vector, _weight in known.values()])
            self._centre = matrix.astype(np.float32).mean(axis=0)
        return self._centre

    def _vectors(self, wanted: set[str]) -> dict[str, tuple]:
        """word -> (vector, weight) for every wanted word: held, stored, or embedded now."""
        found: dict[str, tuple] = {}
        with self._lock:
            for word in wanted:
                held = self._held.get(word)
                if held is not None:
                    self._held.move_to_end(word)
                    found[word] = held
        missing = sorted(wanted - found.keys())
        if missing:
            stored = self._stored(missing)
            fresh = [w for w in missing if w not in stored]
            if fresh:
                stored.update(self._embed_and_store(fresh))
            entries = {w: (vector, word_weight(w)) for w, vector in stored.items()}
            found.update(entries)
            with self._lock:
                self._held.update(entries)
                while len(self._held) > WORDS_HELD:
                    self._held.popitem(last=False)
        return found

    def _stored(self, words_: list[str]) -> dict:
        import numpy as np

        out = {}
        for start in range(0, len(words_), DB_BATCH):
            rows = WordVector.objects.filter(
                model=self.word_model, word__in=words_[start : start + DB_BATCH]
            ).values_list("word", "vector")
            for word, data in rows:
                out[word] = np.frombuffer(bytes(data), dtype="<f2")
        return out

    def _embed_and_store(self, fresh: list[str]) -> dict:
        """Embed words no process had, and keep them for every process (a word another
        worker stored meanwhile is kept as it was: the same model makes the same vector)."""
        import numpy as np

        made = {}
        for start in range(0, len(fresh), EMBED_BATCH):
            batch = fresh[start : start + EMBED_BATCH]
            vectors = np.asarray(self._embed_words(batch), dtype=np.float32)
            self.embedded += len(batch)
            for word, vector in zip(batch, vectors, strict=True):
                made[word] = vector.astype("<f2")
        rows = [
            WordVector(model=self.word_model, word=w, vector=v.tobytes()) for w, v in made.items()
        ]
        for start in range(0, len(rows), DB_BATCH):
            WordVector.objects.bulk_create(rows[start : start + DB_BATCH], ignore_conflicts=True)
        return made

    def forget(self) -> None:
        """Drop the words held by this process (tests, benchmarks: a fresh worker)."""
        with self._lock:
            self._held.clear()
