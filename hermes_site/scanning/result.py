"""Scan results: findings, their selection, and bounded one-line excerpts."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from hermes_site.scanning.hidden import HIDDEN_RUN

# category, reason, start, end, redact, excerpt (None: rendered from the scanned text)
Raw = tuple[str, str, int, int, bool, str | None]

CATEGORIES = (
    "prompt_injection",
    "exfiltration",
    "invisible_unicode",
    "bidi_control",
    "secret",
    "destructive_command",
    "code_execution",
    "credential_harvesting",
    "persistence",
)
KINDS = ("memory", "skill")
EXCERPT_LIMIT = 80
MAX_FINDINGS_PER_CATEGORY = 10
SUMMARY_FINDINGS = 3


@dataclass(frozen=True)
class Finding:
    """What was found and where: `start:end` index the scanned text (for `scan_book`, the
    joined book), and `entries` names the book entries the span touches (empty for
    `scan_text`). The excerpt is one line, bounded, with secrets redacted."""

    category: str
    reason: str
    excerpt: str
    start: int
    end: int
    entries: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScanResult:
    allowed: bool
    findings: list[Finding] = field(default_factory=list)
    kind: str = "memory"

    def summary(self) -> str:
        """One line for a tool result: what was found, why, and where."""
        if self.allowed:
            return f"Content scan passed for this {self.kind}: nothing suspicious found."
        count = len(self.findings)
        parts = [
            f'{f.category}: {f.reason} (at {f.start}: "{f.excerpt}")'
            for f in self.findings[:SUMMARY_FINDINGS]
        ]
        if count > SUMMARY_FINDINGS:
            parts.append(f"and {count - SUMMARY_FINDINGS} more")
        noun = "finding" if count == 1 else "findings"
        return f"Blocked by content scan ({count} {noun}): " + "; ".join(parts)


def select(text: str, raw: list[Raw], quiet: set[int], *, cap: int | None) -> list[Finding]:
    """Drop overlaps within a category, cap each category, order by position."""
    raw.sort(key=lambda r: (r[2], -(r[3] - r[2])))
    kept: list[Raw] = []
    last_end: dict[str, int] = {}
    counts: dict[str, int] = {}
    for item in raw:
        category, _, start, end, _, _ = item
        if start < last_end.get(category, -1) or (
            cap is not None and counts.get(category, 0) >= cap
        ):
            continue
        last_end[category] = end
        counts[category] = counts.get(category, 0) + 1
        kept.append(item)
    secrets = secret_spans(raw)
    return [
        Finding(
            category=category,
            reason=reason,
            excerpt=excerpt
            if excerpt is not None
            else render_excerpt(text, start, end, redact=redact, quiet=quiet, secrets=secrets),
            start=start,
            end=end,
        )
        for category, reason, start, end, redact, excerpt in kept
    ]


def cap_per_category(findings: list[Finding]) -> list[Finding]:
    """`findings` in their order, at most MAX_FINDINGS_PER_CATEGORY of each category."""
    counts: dict[str, int] = {}
    kept = []
    for finding in findings:
        counts[finding.category] = counts.get(finding.category, 0) + 1
        if counts[finding.category] <= MAX_FINDINGS_PER_CATEGORY:
            kept.append(finding)
    return kept


def secret_spans(raw: list[Raw]) -> list[tuple[int, int]]:
    """Where the credentials are, so no excerpt shows one, not even as another's context."""
    return [(start, end) for _, _, start, end, redact, excerpt in raw if redact and excerpt is None]


def _render(
    text: str, start: int, end: int, quiet: set[int], secrets: Sequence[tuple[int, int]]
) -> list[str]:
    """One token per character, hidden ones spelled out, whitespace runs as one space,
    a credential as one "…[redacted]"."""
    tokens: list[str] = []
    i = start
    while i < end:
        masked = next((hi for lo, hi in secrets if lo <= i < hi), None) if secrets else None
        if masked is not None:
            tokens.append("…[redacted]")
            i = masked
            continue
        ch = text[i]
        if ch.isspace():
            if not tokens or tokens[-1] != " ":
                tokens.append(" ")
        elif i not in quiet and (
            HIDDEN_RUN.match(ch) or ch == "\u00ad" or unicodedata.category(ch) in ("Cc", "Cf")
        ):
            tokens.append(f"<U+{ord(ch):04X}>")
        else:
            tokens.append(ch)
        i += 1
    return tokens


def _take(tokens: list[str], budget: int, *, from_end: bool) -> tuple[list[str], bool]:
    """Whole tokens up to `budget` characters; the flag says whether any were left out."""
    taken: list[str] = []
    used = 0
    for tok in reversed(tokens) if from_end else tokens:
        if used + len(tok) > budget:
            break
        taken.append(tok)
        used += len(tok)
    truncated = len(taken) < len(tokens)
    return (taken[::-1] if from_end else taken), truncated


def render_excerpt(
    text: str,
    start: int,
    end: int,
    *,
    redact: bool,
    quiet: set[int],
    secrets: Sequence[tuple[int, int]] = (),
) -> str:
    """At most EXCERPT_LIMIT characters around the match, on one line, credentials redacted
    (a redacted match keeps its first few characters, so a reviewer can tell which key)."""
    others = [span for span in secrets if span != (start, end)] if redact else list(secrets)
    if redact:
        keep = min(6, (end - start) // 4)
        core = [*text[start : start + keep], "…[redacted]"]
    else:
        core = _render(text, start, min(end, start + EXCERPT_LIMIT), quiet, others)
    core, cut = _take(core, EXCERPT_LIMIT - 1, from_end=False)
    if cut or end - start > EXCERPT_LIMIT and not redact:
        return "".join(core).strip() + "…"
    room = EXCERPT_LIMIT - sum(len(t) for t in core)
    left_room = room // 2
    right_room = room - left_room
    left: list[str] = []
    right: list[str] = []
    left_cut = right_cut = False
    if left_room >= 1:  # one character of each side's room is kept for the "…"
        left_source = _render(text, max(0, start - left_room), start, quiet, others)
        left, left_cut = _take(left_source, left_room - 1, from_end=True)
        left_cut = left_cut or start - left_room > 0
    if right_room >= 1:
        right_source = _render(text, end, min(len(text), end + right_room), quiet, others)
        right, right_cut = _take(right_source, right_room - 1, from_end=False)
        right_cut = right_cut or end + right_room < len(text)
    excerpt = ("…" if left_cut else "") + "".join(left + core + right) + ("…" if right_cut else "")
    return excerpt.strip()
