"""Content scanner that every memory write and skill write goes through.

Shared by the memory and skills apps: import from `hermes_site.scanning`.

`scan_text()` looks for four kinds of trouble before anything is stored:

* prompt injection: instruction overrides, role overrides, fake role markers, requests to
  hide things from the user, jailbreak vocabulary (English and Chinese);
* exfiltration: network commands carrying secrets or secret files, prose asking to send
  credentials somewhere, Markdown images/links whose URL would carry a secret;
* hidden Unicode: zero-width, bidi, tag and other format characters;
* secrets: high-confidence credential formats only, so memory never stores them.

It is pure Python (no network, no database) and linear-time: every regex is precompiled,
repetition between literals is bounded, and rules whose trigger words are absent are skipped.

False-positive policy (a blocked write costs the model one rephrase; a stored injection costs
every later turn, so borderline phrasing is blocked, ordinary facts are not):

* An override needs an instruction-like object: "ignore previous instructions/rules/prompts"
  is blocked, "ignore the flaky test in CI" is not. Likewise "忽略之前的指令" is blocked,
  "可以忽略 lint 警告" is not.
* "system prompt" in prose is fine ("the system prompt is rendered from a template"); a *new*
  or *overridden* system prompt, or a request to reveal ours, is not.
* "act as"/"扮演" count only as an imperative (sentence start, "please", "you must …"):
  "Alice will act as on-call lead" and "Alice 扮演重要角色" are facts.
* A line starting with "system:" is a fake role marker only when the rest of the line
  addresses the model (you/assistant/instructions/must/…), so "System: Ubuntu 22.04" passes.
* "developer mode" is blocked when addressed to the model ("you are in developer mode",
  "enter developer mode."), not "enable developer mode on the test phones".
* `curl https://…` is fine in both kinds; `curl … $API_TOKEN` / `~/.ssh` / `.env` is not, even
  in a skill: a skill that needs a credential should name where it comes from, not inline it.
* Invisible characters: soft hyphen (U+00AD) is allowed; ZWJ (U+200D) is allowed between two
  emoji (👩‍💻, 🏳️‍🌈); ZWJ/ZWNJ are allowed between letters of scripts that need them
  (Arabic, Persian, Indic, …); a leading BOM is allowed; Unicode tag characters are allowed
  only inside a subdivision-flag emoji (🏴󠁧󠁢󠁳󠁣󠁴󠁿). Everything else in category Cf is reported.
* `kind="skill"` relaxes nothing today; the parameter exists so skill-specific policy has a
  place to live without changing callers.

Matching happens on a normalised copy (NFKC, casefold, hidden characters stripped, spaces
between CJK characters dropped; every rule matches any whitespace run with `\\s+`, which
collapses whitespace without moving offsets), so full-width letters, mixed case, extra
spaces/newlines and "ig\\u200bnore" are caught; offsets are mapped back to the original.
Secrets are matched on the original text (their formats are case-sensitive) and redacted in
excerpts, so a scan result never repeats a credential.
"""

from __future__ import annotations

from hermes_site.scanning.commands import _command_findings, _url_findings
from hermes_site.scanning.credentials import _secret_findings
from hermes_site.scanning.hidden import _hidden_unicode_findings
from hermes_site.scanning.normalise import _normalise
from hermes_site.scanning.phrases import _TEXT_RULES
from hermes_site.scanning.result import (
    CATEGORIES,
    EXCERPT_LIMIT,
    KINDS,
    Finding,
    ScanResult,
    _select,
)

__all__ = ["CATEGORIES", "EXCERPT_LIMIT", "KINDS", "Finding", "ScanResult", "scan_text"]


def scan_text(text: str, *, kind: str = "memory") -> ScanResult:
    """Scan `text` for injection, exfiltration, hidden Unicode and secrets; never raises on
    content, only on an unknown `kind`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not text:
        return ScanResult(allowed=True, findings=[], kind=kind)
    hidden = _hidden_unicode_findings(text)
    quiet = {pos for f in hidden if f[0] is None for pos in range(f[1], f[2])}
    raw: list[tuple[str, str, int, int, bool]] = [f[3] for f in hidden if f[0] is not None]
    norm = _normalise(text)
    for rule in _TEXT_RULES:
        if rule.triggers and not any(t in norm.text for t in rule.triggers):
            continue
        for m in rule.finditer(norm.text):
            start, end = norm.span(m.start(), m.end())
            raw.append((rule.category, rule.reason, start, end, False))
    raw.extend(_command_findings(norm))
    raw.extend(_url_findings(norm))
    raw.extend(_secret_findings(text))
    findings = _select(text, raw, quiet)
    return ScanResult(allowed=not findings, findings=findings, kind=kind)
