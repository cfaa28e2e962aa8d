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
per language. Figures go to docs/BENCHMARKS.md.
"""

import argparse
import shutil
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
        "--whole-manual",
        action="store_true",
        help="index all 247 pages (default: the 61 pages the questions name, ~1,000 passages)",
    )
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
            report = evaluate(Path(folder), questions, args.k)
    print_report(report, args.k, len(files), len(questions))


def evaluate(folder: Path, questions, k: int) -> dict:
    from django.db import connection

    from knowledge.models import Passage, SyncRun
    from knowledge.search import hybrid_search, passages_for
    from knowledge.sync import collection_for_sync, collection_sync

    collection, _ = collection_for_sync(name="Git manual", path=str(folder))
    started = time.perf_counter()
    counts = collection_sync(
        collection=collection, path=folder, trigger=SyncRun.Trigger.COMMAND
    ).counts
    indexing = time.perf_counter() - started
    passages = Passage.objects.filter(collection=collection).count()
    results: dict[str, dict[str, list]] = {mode: {"en": [], "zh": []} for mode in MODES}
    misses: dict[str, list[str]] = {mode: [] for mode in MODES}
    for question, document, section in questions:
        language = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in question) else "en"
        for mode in MODES:
            found = passages_for(hybrid_search(question, [collection.pk], limit=DEPTH, mode=mode))
            rank = next(
                (n for n, p in enumerate(found, start=1) if answers(p, document, section)), None
            )
            results[mode][language].append(rank)
            if rank is None or rank > k:
                misses[mode].append(question)
    return {
        "database": connection.vendor,
        "counts": counts,
        "indexing_seconds": indexing,
        "passages": passages,
        "results": results,
        "misses": misses,
    }


def scores(ranks: list, k: int) -> tuple[float, float]:
    if not ranks:
        return 0.0, 0.0
    recall = sum(1 for r in ranks if r is not None and r <= k) / len(ranks)
    mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
    return recall, mrr


def print_report(report: dict, k: int, files: int, questions: int) -> None:
    info = machine_info()
    print(f"machine: {info}")
    print(
        f"database: {report['database']}; corpus: {files} files of git-doc, "
        f"{report['passages']} passages; sync {report['counts']} in "
        f"{report['indexing_seconds']:.0f} s ({report['passages'] / report['indexing_seconds']:.1f}"
        f" passages/s); {questions} questions"
    )
    rows = []
    for mode in MODES:
        by_language = report["results"][mode]
        overall = by_language["en"] + by_language["zh"]
        row = [mode]
        for ranks in (overall, by_language["en"], by_language["zh"]):
            recall, mrr = scores(ranks, k)
            row += [f"{recall:.3f}", f"{mrr:.3f}"]
        rows.append(row)
    headers = [
        "method",
        f"recall@{k}",
        "MRR",
        f"recall@{k} (en)",
        "MRR (en)",
        f"recall@{k} (zh)",
        "MRR (zh)",
    ]
    print(markdown_table(headers, rows))
    for mode in MODES:
        print(f"\nmissed by {mode} ({len(report['misses'][mode])}):")
        for question in report["misses"][mode][:40]:
            print(f"  - {question}")


if __name__ == "__main__":
    main()
