"""The labelled corpus: every hostile script is blocked in a skill, every ordinary skill text
passes, and the figures in docs/SECURITY.md and docs/SKILLS.md are the measured ones."""

from pathlib import Path

import pytest

from hermes_site.scanning import scan_skill_files, scan_text
from tests.hermes_site import scanner_corpus as corpus
from tests.hermes_site import scanner_report as report

DOCS = Path(__file__).resolve().parents[2] / "docs"

HOSTILE = [(name, text) for name, texts in corpus.HOSTILE_SCRIPTS.items() for text in texts]
BENIGN = [(name, text) for name, texts in corpus.BENIGN.items() for text in texts]


def test_corpus_is_large_enough():
    assert len(HOSTILE) + len(corpus.HOSTILE_FILE_SETS) >= 60
    assert len(BENIGN) >= 150
    assert all(len(texts) >= 4 for texts in corpus.HOSTILE_SCRIPTS.values())


@pytest.mark.parametrize(("name", "text"), HOSTILE)
def test_hostile_script_is_blocked_in_a_skill(name, text):
    result = scan_text(text, kind="skill")
    assert not result.allowed, f"{name}: {text!r} passed"


@pytest.mark.parametrize(("name", "text"), BENIGN)
def test_ordinary_skill_text_passes(name, text):
    result = scan_text(text, kind="skill")
    assert result.allowed, f"{name}: {result.summary()}"


@pytest.mark.parametrize("files", corpus.HOSTILE_FILE_SETS, ids=lambda f: sorted(f)[-1])
def test_a_payload_split_across_files_is_blocked_though_each_file_passes(files):
    assert all(scan_text(text, kind="skill").allowed for text in files.values())
    results = scan_skill_files(files)
    assert list(results) == list(files)
    blocked = {path for path, result in results.items() if not result.allowed}
    assert blocked, "the concatenation of the files passed"
    for path in blocked:
        for finding in results[path].findings:
            assert 0 <= finding.start < finding.end <= len(files[path])
            assert "across files" in finding.reason


def test_corpus_recall_is_total_and_nothing_benign_is_blocked():
    figures = report.measure()
    assert figures.missed == []
    assert figures.false_positives == []
    assert all(blocked == cases for blocked, cases in figures.recall.values())


def test_docs_show_the_measured_figures():
    figures = report.measure()
    security = (DOCS / "SECURITY.md").read_text()
    skills = (DOCS / "SKILLS.md").read_text()
    assert report.class_table(figures) in security, report.class_table(figures)
    assert report.rule_table(figures) in skills, report.rule_table(figures)
