"""Retrieval quality of team knowledge on a public corpus: Git's manual (Debian package
`git-doc`, /usr/share/doc/git-doc/*.txt, AsciiDoc), with the questions of
bench/knowledge_eval_questions.tsv, each naming the document and section that answers it
(112 in English, 10 in Chinese over the English manual). By default the collection holds
the 61 pages the questions name (~1,000 passages); `--whole-manual` indexes all 247.

    apt-get install git-doc
    .venv/bin/python bench/knowledge_eval.py [--database-url postgres://…] [--k 5]

Builds a throw-away database, syncs the manual into a collection through the real path
(knowledge.sync: extraction, splitting, the offline embeddings model), then asks every
question three ways: full-text only, vectors only, hybrid (reciprocal rank fusion). A passage
answers when it comes from the named document and its last heading is the named section (any
section when none is named). Reported: recall@k (an answering passage among the first k)
and MRR (mean of 1 / rank of the first answering passage within the first 10), overall and
per language and for the first and second half of the questions (a sanity check against
tuning to some of them). Figures go to docs/BENCHMARKS.md.

Vectors are cached in var/bench-cache/knowledge-eval.sqlite3, keyed by the model's name,
passage or query, and the sha256 of the embedded text: a re-run embeds only texts that
changed (the offline model makes ~1.6 passages/s on this machine). `--no-cache` embeds all.
"""

import argparse
import contextlib
import hashlib
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    machine_info,
    markdown_table,
    migrate,
    setup_django,
    temporary_database,
)

CORPUS = Path("/usr/share/doc/git-doc")
CACHE = Path(__file__).resolve().parent.parent / "var" / "bench-cache" / "knowledge-eval.sqlite3"
QUESTIONS = Path(__file__).resolve().parent / "knowledge_eval_questions.tsv"
MODES = ("fulltext", "vector", "hybrid")
DEPTH = 10


def load_questions() -> list[tuple[str, str, str]]:
    rows = []
    for line in QUESTIONS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        question, document, section = (line.split("\t") + ["", ""])[:3]
        rows.append((question.strip(), document.strip(), section.strip()))
    return rows


def answers(passage, document: str, section: str) -> bool:
    if passage.document.path != document:
        return False
    return not section or passage.section.split(" › ")[-1] == section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument(
        "--no-cache", action="store_true", help="embed every text again (no vector cache)"
    )
    parser.add_argument(
        "--whole-manual",
        action="store_true",
        help="index all 247 pages (default: the 61 pages the questions name, ~1,000 passages)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="also evaluate with knowledge.search settings NAME=VALUE,... (repeatable; "
        "the collection is indexed once)",
    )
    parser.add_argument("--misses", action="store_true", help="list the questions missed")
    args = parser.parse_args()
    questions = load_questions()
    named = {document for _, document, _ in questions}
    files = sorted(p for p in CORPUS.glob("*.txt") if args.whole_manual or p.name in named)
    if not files:
        raise SystemExit(f"No corpus at {CORPUS}: apt-get install git-doc")
    with tempfile.TemporaryDirectory(prefix="knowledge-eval-") as folder:
        for path in files:
            shutil.copyfile(path, Path(folder) / path.name)
        with temporary_database(args.database_url, label="knowledge_eval") as url:
            setup_django(url)
            migrate()
            if not args.no_cache:
                use_vector_cache(CACHE)
            reports = evaluate(Path(folder), questions, args.k, ["", *args.variant])
    for report in reports:
        print_report(report, args.k, len(files), len(questions), misses=args.misses)


class VectorCache:
    """Vectors by (model, kind, sha256 of the text) in a SQLite file; the real model is
    asked only for the texts it lacks."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (model TEXT, kind TEXT, sha TEXT, vector BLOB,"
            " PRIMARY KEY (model, kind, sha))"
        )
        self.hits = self.misses = 0

    def wrap(self, model_name: str, kind: str, real):
        """A function texts -> vectors like `real`, answering from the cache first."""
        from knowledge.embeddings import from_bytes, to_bytes

        def embed(texts: list[str]):
            keys = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
            found = {}
            for key in set(keys):
                row = self.db.execute(
                    "SELECT vector FROM vectors WHERE model = ? AND kind = ? AND sha = ?",
                    (model_name, kind, key),
                ).fetchone()
                if row:
                    found[key] = from_bytes(row[0])
            wanted = [(k, t) for k, t in dict(zip(keys, texts, strict=True)).items()
                      if k not in found]  # fmt: skip
            self.hits += len(texts) - len(wanted)
            self.misses += len(wanted)
            if wanted:
                made = real([t for _, t in wanted])
                for (key, _), vector in zip(wanted, made, strict=True):
                    found[key] = vector
                    self.db.execute(
                        "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)",
                        (model_name, kind, key, to_bytes(vector)),
                    )
                self.db.commit()
            return [found[key] for key in keys]

        return embed


def use_vector_cache(path: Path) -> VectorCache:
    """Route the knowledge app's embedder (as knowledge.indexing and knowledge.vectors call
    it) through a VectorCache; the real model loads only on a miss."""
    import knowledge.indexing
    import knowledge.vectors
    from knowledge import embeddings

    cache = VectorCache(path)
    real_embedder = embeddings.embedder
    held: dict[str, object] = {}

    def cached_embedder():
        name = embeddings.embedder_name()
        if name not in held:
            held.clear()
            held[name] = embeddings.Embedder(
                name=name,
                _passages=cache.wrap(name, "passage", lambda t: real_embedder().passages(t)),
                _query=cache.wrap(name, "query", lambda t: [real_embedder().query(t[0])]),
                # The cache's sqlite3 connection belongs to this thread: questions are
                # embedded here, not beside the full-text search.
                callers_thread=True,
            )
        return held[name]

    knowledge.indexing.embedder = cached_embedder
    knowledge.vectors.embedder = cached_embedder
    global ACTIVE_CACHE
    ACTIVE_CACHE = cache
    return cache


ACTIVE_CACHE: VectorCache | None = None


def evaluate(folder: Path, questions, k: int, variants: list[str]) -> list[dict]:
    """Sync the folder once, then ask the questions under each variant (the settings of
    knowledge.search as they are, then each `NAME=VALUE,...` given)."""
    from django.db import connection

    from knowledge.models import Passage, SyncRun
    from knowledge.sync import collection_for_sync, collection_sync

    collection, _ = collection_for_sync(name="Git manual", path=str(folder))
    started = time.perf_counter()
    counts = collection_sync(
        collection=collection, path=folder, trigger=SyncRun.Trigger.COMMAND
    ).counts
    indexing = time.perf_counter() - started
    passages = Passage.objects.filter(collection=collection).count()
    reports = []
    for variant in variants:
        with search_settings(variant):
            results, misses = ask(collection, questions, k)
        reports.append(
            {
                "variant": variant or "as configured",
                "database": connection.vendor,
                "counts": counts,
                "indexing_seconds": indexing,
                "passages": passages,
                "results": results,
                "misses": misses,
            }
        )
    return reports


@contextlib.contextmanager
def search_settings(variant: str):
    """knowledge.search's module settings (HEADING_WEIGHT, MAX_PER_SECTION, ...) set from
    `NAME=VALUE,...` for the duration, restored after."""
    from knowledge import search

    saved = {}
    for item in filter(None, (part.strip() for part in variant.split(","))):
        name, _, value = item.partition("=")
        if not hasattr(search, name):
            raise SystemExit(f"knowledge.search has no setting {name}")
        saved[name] = getattr(search, name)
        setattr(search, name, type(saved[name])(float(value)))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(search, name, value)


def ask(collection, questions, k: int):
    """Each question three ways: (mode -> [(language, rank or None)] in the file's order,
    mode -> the questions missed within k, with what was found instead)."""
    from knowledge.search import hybrid_search, passages_for

    results: dict[str, list[tuple[str, int | None]]] = {mode: [] for mode in MODES}
    misses: dict[str, list[str]] = {mode: [] for mode in MODES}
    for question, document, section in questions:
        language = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in question) else "en"
        for mode in MODES:
            found = passages_for(hybrid_search(question, [collection.pk], limit=DEPTH, mode=mode))
            rank = next(
                (n for n, p in enumerate(found, start=1) if answers(p, document, section)), None
            )
            results[mode].append((language, rank))
            if rank is None or rank > k:
                top = "; ".join(f"{p.document.path} › {p.section.split(' › ')[-1]}"
                                for p in found[:k])  # fmt: skip
                misses[mode].append(f"{question} [{document} › {section}] got: {top}")
    return results, misses


def scores(ranks: list, k: int) -> tuple[float, float]:
    if not ranks:
        return 0.0, 0.0
    recall = sum(1 for r in ranks if r is not None and r <= k) / len(ranks)
    mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
    return recall, mrr


def print_report(report: dict, k: int, files: int, questions: int, *, misses: bool) -> None:
    info = machine_info()
    print(f"\n## {report['variant']}\nmachine: {info}")
    print(
        f"database: {report['database']}; corpus: {files} files of git-doc, "
        f"{report['passages']} passages; sync {report['counts']} in "
        f"{report['indexing_seconds']:.0f} s ({report['passages'] / report['indexing_seconds']:.1f}"
        f" passages/s); {questions} questions"
    )
    rows = []
    for mode in MODES:
        ranked = report["results"][mode]
        half = len(ranked) // 2
        groups = (
            [r for _, r in ranked],
            [r for lang, r in ranked if lang == "en"],
            [r for lang, r in ranked if lang == "zh"],
            [r for _, r in ranked[:half]],
            [r for _, r in ranked[half:]],
        )
        row = [mode]
        for ranks in groups:
            recall, mrr = scores(ranks, k)
            row += [f"{recall:.3f}", f"{mrr:.3f}"]
        rows.append(row)
    headers = ["method"]
    for group in ("", " (en)", " (zh)", " (1st half)", " (2nd half)"):
        headers += [f"recall@{k}{group}", f"MRR{group}"]
    print(markdown_table(headers, rows))
    if ACTIVE_CACHE is not None:
        print(f"vector cache: {ACTIVE_CACHE.hits} hits, {ACTIVE_CACHE.misses} embedded")
    for mode in MODES if misses else ():
        print(f"\nmissed by {mode} ({len(report['misses'][mode])}):")
        for question in report["misses"][mode][:60]:
            print(f"  - {question}")


if __name__ == "__main__":
    main()
