"""Recall per class and precision per rule of the content scanner on the labelled corpus
(`scanner_corpus.py` plus the hostile and benign lists of the other scanner tests).

A rule is a finding's category and reason, without the note on how the text was hidden
("decoded from base64", "across files: …"). A case counts as blocked when any rule blocks it.
Run `python -m tests.hermes_site.scanner_report` to print the tables that docs/SECURITY.md
and docs/SKILLS.md keep, `--write` to update them there (a test checks they are current).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hermes_site.scanning import scan_skill_files, scan_text
from tests.hermes_site import scanner_corpus as corpus

_HOW_HIDDEN = re.compile(
    r" \((?:written with look-alike|spelled with|decoded from|in hidden tag|in variation"
    r"|across files|after the shell)[^()]*(?:\([^()]*\)[^()]*)*\)"
)
SPLIT_CLASS = "payload split across files"
BOM_CLASS = "files that start with a byte-order mark, read together (issue 31)"


def rule_of(category: str, reason: str) -> str:
    """The rule behind a finding: its category and reason, minus how the text was hidden."""
    reason = _HOW_HIDDEN.sub("", reason)
    if category in ("invisible_unicode", "bidi_control"):
        reason = re.split(r': "| \(U\+', reason, maxsplit=1)[0]
    return f"{category}: {reason}"


def hostile_classes() -> dict[str, list[object]]:
    """Each hostile class with its cases: a text, or a skill's files (path -> text)."""
    from tests.hermes_site.test_scanning import HOSTILE
    from tests.hermes_site.test_scanning_commands import HOSTILE_COMMANDS, SKILL_ONLY
    from tests.hermes_site.test_scanning_obfuscation import HOSTILE_ALL

    classes: dict[str, list[object]] = {SPLIT_CLASS: list(corpus.HOSTILE_FILE_SETS)}
    classes.update(corpus.HOSTILE_SCRIPTS)
    classes["earlier hostile texts (injection, exfiltration, Unicode, secrets)"] = list(HOSTILE)
    classes["earlier hostile commands"] = [c[0] for c in HOSTILE_COMMANDS + SKILL_ONLY]
    classes["earlier hidden or disguised texts"] = list(HOSTILE_ALL)
    return classes


def benign_classes() -> dict[str, list[object]]:
    """Each benign class with its cases: a text, or a skill's files (path -> text); skills
    must be able to hold every one."""
    from tests.hermes_site.test_scanning import BENIGN_MEMORY, BENIGN_SKILL
    from tests.hermes_site.test_scanning_commands import BENIGN_SKILL_COMMANDS
    from tests.hermes_site.test_scanning_obfuscation import BENIGN_MORE

    classes: dict[str, list[object]] = dict(corpus.BENIGN)
    classes[BOM_CLASS] = list(corpus.BENIGN_FILE_SETS)
    classes["earlier benign facts and skill texts"] = BENIGN_MEMORY + BENIGN_SKILL
    classes["earlier benign runbook commands"] = list(BENIGN_SKILL_COMMANDS)
    classes["earlier benign other scripts, emoji, code and IDs"] = list(BENIGN_MORE)
    return classes


def rules_hit(case: object) -> set[str]:
    """The rules that block `case` when it is stored as (part of) a skill."""
    if isinstance(case, dict):
        results = scan_skill_files(case).values()
        return {rule_of(f.category, f.reason) for r in results for f in r.findings}
    return {rule_of(f.category, f.reason) for f in scan_text(case, kind="skill").findings}


@dataclass
class Figures:
    recall: dict[str, tuple[int, int]] = field(default_factory=dict)  # class: (blocked, cases)
    benign: dict[str, tuple[int, int]] = field(default_factory=dict)  # class: (blocked, texts)
    hostile_hits: dict[str, int] = field(default_factory=dict)  # rule: hostile cases it blocks
    alone: dict[str, int] = field(default_factory=dict)  # rule: cases no other rule blocks
    benign_hits: dict[str, int] = field(default_factory=dict)  # rule: benign texts it blocks
    missed: list[object] = field(default_factory=list)
    false_positives: list[tuple[str, str]] = field(default_factory=list)  # (text, rules)


def measure() -> Figures:
    """Scan every case of the corpus once and count, per class and per rule."""
    figures = Figures()
    for name, cases in hostile_classes().items():
        blocked = 0
        for case in cases:
            rules = rules_hit(case)
            if not rules:
                figures.missed.append(case)
                continue
            blocked += 1
            for rule in rules:
                figures.hostile_hits[rule] = figures.hostile_hits.get(rule, 0) + 1
            if len(rules) == 1:
                (rule,) = rules
                figures.alone[rule] = figures.alone.get(rule, 0) + 1
        figures.recall[name] = (blocked, len(cases))
    for name, cases in benign_classes().items():
        blocked = 0
        for text in cases:
            rules = rules_hit(text)
            if rules:
                blocked += 1
                figures.false_positives.append((text, ", ".join(sorted(rules))))
            for rule in rules:
                figures.benign_hits[rule] = figures.benign_hits.get(rule, 0) + 1
        figures.benign[name] = (blocked, len(cases))
    return figures


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "–"


def class_table(figures: Figures) -> str:
    """Markdown: recall per hostile class, then what the benign classes let through."""
    lines = ["| hostile class (kind=skill) | cases | blocked | recall |", "|---|---:|---:|---:|"]
    for name, (blocked, cases) in figures.recall.items():
        lines.append(f"| {name} | {cases} | {blocked} | {_pct(blocked, cases)} |")
    total = [sum(v[i] for v in figures.recall.values()) for i in (0, 1)]
    lines.append(f"| **all hostile** | {total[1]} | {total[0]} | {_pct(*total)} |")
    lines += [
        "",
        "| benign class (kind=skill) | texts | blocked | passed |",
        "|---|---:|---:|---:|",
    ]
    for name, (blocked, texts) in figures.benign.items():
        lines.append(f"| {name} | {texts} | {blocked} | {_pct(texts - blocked, texts)} |")
    total = [sum(v[i] for v in figures.benign.values()) for i in (0, 1)]
    lines.append(
        f"| **all benign** | {total[1]} | {total[0]} | {_pct(total[1] - total[0], total[1])} |"
    )
    return "\n".join(lines)


def rule_table(figures: Figures) -> str:
    """Markdown: per rule, the hostile cases it blocks (alone), the benign ones, precision."""
    lines = [
        "| rule (category: reason) | hostile blocked | of which only this rule | benign blocked "
        "| precision |",
        "|---|---:|---:|---:|---:|",
    ]
    rules = sorted(set(figures.hostile_hits) | set(figures.benign_hits))
    for rule in rules:
        tp, fp = figures.hostile_hits.get(rule, 0), figures.benign_hits.get(rule, 0)
        lines.append(
            f"| {rule} | {tp} | {figures.alone.get(rule, 0)} | {fp} | {_pct(tp, tp + fp)} |"
        )
    return "\n".join(lines)


DOCS = Path(__file__).resolve().parents[2] / "docs"


def write_docs(figures: Figures) -> None:
    """Replace the tables in docs/SECURITY.md and docs/SKILLS.md with `figures`."""
    for name, table, head in (
        ("SECURITY.md", class_table(figures), "| hostile class"),
        ("SKILLS.md", rule_table(figures), "| rule (category"),
    ):
        path = DOCS / name
        text = path.read_text()
        start = text.index(head)
        last = text.index("| **all benign**", start) if name == "SECURITY.md" else start
        end = text.find("\n\n", last)
        end = len(text.rstrip("\n")) if end == -1 else end
        path.write_text(text[:start] + table + text[end:])


if __name__ == "__main__":
    result = measure()
    if "--write" in sys.argv:
        write_docs(result)
    print(class_table(result), end="\n\n")
    print(rule_table(result))
    for case in result.missed:
        print("MISSED:", repr(case)[:160])
    for text, rules in result.false_positives:
        print("FALSE POSITIVE:", repr(text)[:120], "->", rules)
