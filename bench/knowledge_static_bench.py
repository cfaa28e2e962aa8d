"""The static embedder's rate (KNOWLEDGE_EMBEDDINGS_LOCAL=static, knowledge.static_embeddings)
on a throw-away database: passages per second from a cold word table (every word new: the
offline model embeds it) and warm (the words in the table, or held by the process), on two
corpora, and a question's embedding in ms.

    .venv/bin/python bench/knowledge_static_bench.py [--database-url postgres://…]
        [--synthetic 1000] [--wordllama]

Corpora: Git's manual (the 61 pages of bench/knowledge_eval.py, split as indexing splits
them; apt-get install git-doc) and the synthetic Zipf corpus of bench/knowledge_bench.py
(20,000 words, Chinese sentences mixed in), `--synthetic` passages of 9 sentences, then as
many new passages over the same vocabulary (a collection growing after its first sync).
Passages go through `Embedder.passages` in batches of 32, as knowledge.indexing sends them.
`--wordllama` also measures the `wordllama` package (if installed) on the same passages.
"""

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import machine_info, migrate, percentile, setup_django, temporary_database  # noqa: E402

BATCH = 32


def git_doc_passages() -> tuple[list[str], list[str]]:
    from knowledge_eval import CORPUS, load_questions

    from knowledge.splitting import split_document

    questions = load_questions()
    texts = []
    for name in sorted({document for _, document, _ in questions}):
        text = (CORPUS / name).read_text(encoding="utf-8", errors="replace")
        for piece in split_document(text, max_tokens=300):
            texts.append(f"{piece.section}\n{piece.text}" if piece.section else piece.text)
    return texts, [question for question, _, _ in questions]


def synthetic_passages(count: int) -> tuple[list[str], list[str], list[str]]:
    from knowledge_bench import Corpus

    corpus = Corpus()
    first = [corpus.section(9) for _ in range(count)]
    more = [corpus.section(9) for _ in range(count)]
    return first, more, [corpus.question() for _ in range(200)]


def fresh_process() -> None:
    """What a new worker has: no embedder, no words held (the word table stays)."""
    from knowledge import embeddings

    embeddings._cached.clear()


def show(row: tuple) -> None:
    label, state, count, per_second, embedded = row
    print(f"| {label} | {state} | {count:,} | {per_second:,.1f} | {embedded:,} |", flush=True)


def rate(texts: list[str]) -> tuple[float, int]:
    """(passages per second, words the model embedded) for `texts` through the embedder."""
    from knowledge.embeddings import embedder

    model = embedder()
    static = model._passages.__self__
    before = static.embedded
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        model.passages(texts[start : start + BATCH])
    seconds = time.perf_counter() - started
    return len(texts) / seconds, static.embedded - before


def query_ms(questions: list[str]) -> tuple[float, float]:
    """p50, p95 of a question's embedding, its words known."""
    from knowledge.embeddings import embedder

    model = embedder()
    for question in questions:  # their words embedded, and held: a worker's steady state
        model.query(question)
    times = []
    for question in questions:
        started = time.perf_counter()
        model.query(question)
        times.append((time.perf_counter() - started) * 1000)
    return percentile(times, 50), percentile(times, 95)


def measure(label: str, texts: list[str], questions: list[str], more: list[str] | None):
    from knowledge.models import WordVector

    WordVector.objects.all().delete()
    fresh_process()
    rows = []
    cold, embedded = rate(texts)
    rows.append((label, "cold: empty word table", len(texts), cold, embedded))
    show(rows[-1])
    fresh_process()
    warm_table, embedded = rate(texts)
    rows.append((label, "warm: words in the table, new process", len(texts), warm_table, embedded))
    show(rows[-1])
    from knowledge.embeddings import embedder

    embedder()._recent.clear()  # the same process, its words held; passages not remembered
    warm_held, embedded = rate(texts)
    rows.append((label, "warm: words held by the process", len(texts), warm_held, embedded))
    show(rows[-1])
    if more:
        fresh_process()
        grown, embedded = rate(more)
        rows.append((label, "new passages, same vocabulary, new process", len(more), grown,
                     embedded))  # fmt: skip
        show(rows[-1])
    fresh_process()
    p50, p95 = query_ms(questions)
    return rows, (label, p50, p95)


def wordllama_rate(texts: list[str], questions: list[str]) -> str:
    try:
        import wordllama
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference
    except ImportError:
        return "wordllama: not installed"
    base = Path(wordllama.__file__).parent
    started = time.perf_counter()
    # WordLlama.load() looks for the tokenizer in the wrong folder and downloads it; the
    # wheel ships both files.
    tokenizer = Tokenizer.from_file(str(base / "tokenizers/l2_supercat_tokenizer_config.json"))
    with safe_open(
        str(base / "weights/l2_supercat_256.safetensors"), framework="np", device="cpu"
    ) as file:
        model = WordLlamaInference(file.get_tensor("embedding.weight"), tokenizer)
    load = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        model.embed(texts[start : start + BATCH], norm=True)
    per_second = len(texts) / (time.perf_counter() - started)
    times = []
    for question in questions:
        started = time.perf_counter()
        model.embed([question], norm=True)
        times.append((time.perf_counter() - started) * 1000)
    return (
        f"wordllama l2_supercat_256: load {load:.2f} s, {per_second:,.0f} passages/s, "
        f"question p50 {percentile(times, 50):.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--synthetic", type=int, default=1000)
    parser.add_argument("--wordllama", action="store_true")
    args = parser.parse_args()
    os.environ["KNOWLEDGE_EMBEDDINGS_LOCAL"] = "static"
    os.environ["KNOWLEDGE_EMBEDDINGS_BASE_URL"] = ""
    print("| corpus | state | passages | passages/s | words embedded |")
    print("|---|---|---|---|---|", flush=True)
    with temporary_database(args.database_url, label="knowledge_static") as url:
        setup_django(url)
        migrate()
        git_texts, git_questions = git_doc_passages()
        first, more, synthetic_questions = synthetic_passages(args.synthetic)
        rows, queries = [], []
        for label, texts, questions, grown in (
            ("git-doc", git_texts, git_questions, None),
            ("synthetic", first, synthetic_questions, more),
        ):
            found, query = measure(label, texts, questions, grown)
            rows += found
            queries.append(query)
        extra = wordllama_rate(git_texts, git_questions) if args.wordllama else ""
    print(f"machine: {machine_info()}")
    for label, p50, p95 in queries:
        print(f"question ({label}, words known): p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if extra:
        print(extra)


if __name__ == "__main__":
    main()
