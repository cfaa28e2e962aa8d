"""A skill scanned as what it can run: the concatenation of its files.

Each file passing on its own proves little: `cat scripts/p1 scripts/p2 | sh` runs a command
split between two files, and two halves of a base64 payload decode only together. So the
files are also read as one text, the way `cat` joins them (nothing in between): SKILL.md
first, then the other paths in sorted order (the order of a shell glob such as
`cat scripts/*`), and again in every order a `cat a b …` in the skill names (at most
`MAX_ORDERS`, and never more extra text than the skill holds, so the work stays linear).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from hermes_site.scanning.engine import scan_raw
from hermes_site.scanning.result import (
    KINDS,
    MAX_FINDINGS_PER_CATEGORY,
    Finding,
    ScanResult,
    cap_per_category,
    select,
)

SKILL_FILE = "SKILL.md"
MAX_ORDERS = 8
MAX_NAMED = 16

# `cat a b`, `type a b`, `tac a b`: two or more operands, options skipped.
_CAT = re.compile(r"(?<![\w.-])(?:cat|type|tac)((?:[ \t]+[^\s|;&<>`)]{1,300}){2,16})")


def default_order(paths: list[str]) -> list[str]:
    """SKILL.md first, then every other path sorted (how `cat dir/*` lists them)."""
    return sorted(paths, key=lambda p: (p != SKILL_FILE, p))


def named_orders(files: Mapping[str, str]) -> list[list[str]]:
    """The orders in which `cat a b …` commands in the skill join two or more of its files."""
    paths = list(files)
    orders: list[list[str]] = []
    for text in files.values():
        for m in _CAT.finditer(text):
            order = []
            for word in m.group(1).split()[:MAX_NAMED]:
                path = _resolve(word.strip("\"'"), paths)
                if path is not None:
                    order.append(path)
            if len(order) >= 2 and order not in orders:
                orders.append(order)
            if len(orders) >= MAX_ORDERS:
                return orders
    return orders


def _resolve(word: str, paths: list[str]) -> str | None:
    """The skill file an operand names (`scripts/p1`, `./scripts/p1`, `$SKILL_DIR/scripts/p1`)."""
    word = word.removeprefix("./")
    if not word or word.startswith("-"):
        return None
    for path in paths:
        if word == path or word.endswith("/" + path):
            return path
    return None


def scan_skill_files(files: Mapping[str, str], *, kind: str = "skill") -> dict[str, ScanResult]:
    """Scan a skill's text files alone and joined as one script; never raises on content.

    Contract: `files` maps each path of the skill's NEW version (`SKILL.md` included, as
    stored: text files only) to its text. The result has one ScanResult per path, in the
    order of `files`, holding what `scan_text(text, kind=kind)` finds in that file plus what
    is found only when the files are read together (see the module docstring). Offsets
    always index that path's own text: a finding that spans several files is clipped to
    each file's part and reported in each, its reason ending in "(across files: a + b)",
    and its excerpt shows the joined text. At most MAX_FINDINGS_PER_CATEGORY findings per
    category per path. Pure: no database, no file system."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    results = {path: _scan_one(text, kind) for path, text in files.items()}
    if len(files) < 2:
        return results
    seen = {
        path: {(f.category, f.reason, f.start, f.end) for f in result.findings}
        for path, result in results.items()
    }
    extra: dict[str, list[Finding]] = {path: [] for path in files}
    budget = sum(len(t) for t in files.values())
    for i, order in enumerate([default_order(list(files)), *named_orders(files)]):
        size = sum(len(files[p]) for p in order)
        if i and size > budget:
            continue
        budget -= size if i else 0
        for path, key, finding in _joined_findings(files, order, kind):
            if key not in seen[path]:
                seen[path].add(key)
                extra[path].append(finding)
    out = {}
    for path, result in results.items():
        if not extra[path]:
            out[path] = result
            continue
        findings = cap_per_category(sorted([*result.findings, *extra[path]], key=lambda f: f.start))
        out[path] = ScanResult(allowed=False, findings=findings, kind=kind)
    return out


def _scan_one(text: str, kind: str) -> ScanResult:
    if not text:
        return ScanResult(allowed=True, findings=[], kind=kind)
    raw, quiet = scan_raw(text, kind=kind)
    findings = select(text, raw, quiet, cap=MAX_FINDINGS_PER_CATEGORY)
    return ScanResult(allowed=not findings, findings=findings, kind=kind)


Key = tuple[str, str, int, int]


def _joined_findings(
    files: Mapping[str, str], order: list[str], kind: str
) -> list[tuple[str, Key, Finding]]:
    """Findings of the files joined in `order`, each clipped to every path it touches."""
    joined = "".join(files[p] for p in order)
    if not joined:
        return []
    bounds, pos = [], 0
    for path in order:
        bounds.append((path, pos, pos + len(files[path])))
        pos += len(files[path])
    starts = frozenset(lo for _, lo, _ in bounds)
    raw, quiet = scan_raw(joined, kind=kind, file_starts=starts)
    out = []
    for finding in select(joined, raw, quiet, cap=None):
        touched = [(p, lo, hi) for p, lo, hi in bounds if finding.start < hi and lo < finding.end]
        names = [p for p, _, _ in touched]
        if len(names) == 1:  # found only after what came before it in the joined text
            k = order.index(names[0])
            names = [*order[max(0, k - 1) : k], names[0]]
        reason = f"{finding.reason} (across files: {' + '.join(names)})"
        for path, lo, hi in touched:
            start, end = max(finding.start, lo) - lo, min(finding.end, hi) - lo
            key = (finding.category, finding.reason, start, end)
            out.append((path, key, replace(finding, reason=reason, start=start, end=end)))
    return out
