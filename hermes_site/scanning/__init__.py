"""Content scanner that every memory write and skill write goes through.

Shared by the memory and skills apps: import from `hermes_site.scanning`.

`scan_text()` looks for these kinds of trouble before anything is stored:

* prompt injection: instruction overrides, role overrides, fake role markers, requests to
  hide things from the user, jailbreak vocabulary (English and Chinese);
* exfiltration: network commands carrying secrets or secret files, prose asking to send
  credentials somewhere, Markdown images/links whose URL would carry a secret;
* hidden Unicode: zero-width, bidi, tag, variation-selector, filler and other format or
  default-ignorable characters;
* secrets: high-confidence credential formats only, so memory never stores them;
* commands (`destructive.py`, `execution.py`, `harvesting.py` on `shell.py`): destructive
  ones (recursive deletes or permission changes of /, ~ or a system directory, disk wiping,
  fork bombs, `kill -9 -1`, dropping or emptying production data), downloads or decoded
  payloads run as code (`curl … | sh`, `bash <(curl …)`, `iex (…DownloadString(…))`,
  `base64 -d | sh`), and credential harvesting (reading SSH private keys, cloud credentials,
  `.env`, `/etc/shadow`, keychains, browser cookie and password databases, secret
  environment variables). Runbook commands pass: `rm -rf build/`, `dd of=disk.img`,
  `curl -fsSL URL -o file`, `DROP TABLE IF EXISTS tmp_x`, `chmod +x script.sh`;
* persistence (`persistence.py`): keys added to `authorized_keys`, cron jobs installed
  without a person editing them, shell start-up files that download, login items, reverse
  shells. Commands are also read as the shell reads them (`shellview.py`: `cu''rl`,
  `${IFS}`, `$(echo lruc | rev)`, `c=curl; $c`), and a skill's files are read joined, as
  `cat` would run them (`scan_skill_files`, `files.py`).

The same rules also run on what a text hides (`engine.py`): look-alike letters from other
scripts read as Latin (`confusables.py`), words spelled with separators or leet joined
(`spelling.py`), and the text carried by tag characters, variation selectors, base64, hex
or URL encoding decoded (`hidden.py`, `encoded.py`). Such findings say how the text was
hidden in their reason, keep offsets into the original, and (for decoded text) show the
decoded text in their excerpt. `scan_book()` scans a whole book so an instruction split
across entries is seen; `reveal_hidden()` shows hidden code points on approval pages.

It is pure Python (no network, no database) and linear-time: every regex is precompiled,
repetition between literals is bounded, and rules whose trigger words are absent are skipped.

False-positive policy (a blocked write costs the model one rephrase; a stored injection costs
every later turn, so borderline phrasing is blocked, ordinary facts are not):

* An override needs an instruction-like object: "ignore previous instructions/rules/prompts"
  is blocked, "ignore the flaky test in CI" is not. Likewise "忽略之前的指令" is blocked,
  "可以忽略 lint 警告" is not.
* "system prompt" in prose is fine ("the system prompt is rendered from a template"); a *new*
  or *overridden* system prompt, or a request to reveal ours, is not.
* "act as" counts only with a role without limits ("act as an unrestricted AI", "as if you
  had no rules"): "Act as an active guide" is how a skill sets a tone. "扮演" counts only as
  an imperative: "Alice 扮演重要角色" is a fact. "You are now ready to deploy" is prose.
* Role-play, jailbreak vocabulary and chat markers are mentions when quoted as an example
  ('type "roleplay as a pirate"'), negated ("never roleplay as …"), technical ("detect
  jailbreak attempts", "jailbreak-contrastive directions", "越狱攻击检测") or data in code
  (`stop=["</s>"]`, a marker in an inline code span or a ```python/```json block).
* A line starting with "system:" (or a "## System" heading) is a fake role marker only when
  what follows addresses the model (you/assistant/instructions/must/obey/…), so
  "System: Ubuntu 22.04" passes; only a real line start counts, not a blank line nearby.
* "developer mode" is blocked when addressed to the model ("you are in developer mode",
  "enter developer mode."), not "enable developer mode on the test phones".
* `curl https://…` is fine in both kinds; a credential sent to its own API passes
  (`-H "Authorization: Bearer $AIRTABLE_API_KEY" https://api.airtable.com/…`: the variable is
  named for the service the https host is registered under, see `own_api.py`); a generic
  `$API_TOKEN`, `~/.ssh`, `.env`, the environment, or a credential sent to another host is
  not.
* Invisible characters: soft hyphen (U+00AD) is allowed; ZWJ (U+200D) is allowed between two
  emoji (👩‍💻, 🏳️‍🌈); ZWJ/ZWNJ are allowed between letters of scripts that need them
  (Arabic, Persian, Indic, Mongolian, …); one variation selector is allowed on a base that
  has variants (VS16 on ❤, an ideographic selector on a kanji); a BOM that starts the text (or,
  in `scan_skill_files`, one of the files) is allowed;
  Unicode tag characters are allowed only inside the recommended subdivision flags
  (England, Scotland, Wales). Everything else in category Cf or Default_Ignorable_Code_Point
  is reported (see `hidden.py`).
* Look-alikes and spellings: a word is rewritten only when every letter has a Latin
  look-alike, so Russian, Greek or Japanese text is not; separators and leet are read only
  where the rewrite spells a word of the rules, so IDs, versions and snake_case pass.
* Encoded runs count only when they decode to text: hashes, UUIDs and random IDs pass.
* `kind="skill"` relaxes nothing; it adds the one rule that fits skills only (force-pushing a
  main branch). Every other rule applies to both kinds.
* A command given as advice ("never run `rm -rf /`", "do not `cat .env`") is not one.

Matching happens on a normalised copy (NFKC, casefold, hidden characters stripped, spaces
between CJK characters dropped; every rule matches any whitespace run with `\\s+`, which
collapses whitespace without moving offsets), so full-width letters, mixed case, extra
spaces/newlines and "ig\\u200bnore" are caught; offsets are mapped back to the original.
Secrets are matched on the original text (their formats are case-sensitive) and redacted in
excerpts, so a scan result never repeats a credential.
"""

from __future__ import annotations

from dataclasses import replace

from hermes_site.scanning.engine import scan_raw
from hermes_site.scanning.files import scan_skill_files
from hermes_site.scanning.result import (
    CATEGORIES,
    EXCERPT_LIMIT,
    KINDS,
    MAX_FINDINGS_PER_CATEGORY,
    Finding,
    ScanResult,
    cap_per_category,
    select,
)
from hermes_site.scanning.reveal import reveal_hidden

__all__ = [
    "CATEGORIES",
    "EXCERPT_LIMIT",
    "KINDS",
    "Finding",
    "ScanResult",
    "reveal_hidden",
    "scan_book",
    "scan_skill_files",
    "scan_text",
]

BOOK_SEPARATOR = "\n"


def scan_text(text: str, *, kind: str = "memory") -> ScanResult:
    """Scan `text` for injection, exfiltration, hidden Unicode, secrets, destructive commands,
    code execution and credential harvesting, also in what it hides (look-alike letters,
    spelled-out words, tag characters, encoded runs); never raises on content, only on an
    unknown `kind`."""
    _check_kind(kind)
    if not text:
        return ScanResult(allowed=True, findings=[], kind=kind)
    raw, quiet = scan_raw(text, kind=kind)
    findings = select(text, raw, quiet, cap=MAX_FINDINGS_PER_CATEGORY)
    return ScanResult(allowed=not findings, findings=findings, kind=kind)


def scan_book(texts: list[str], *, changed: int | None = None, kind: str = "memory") -> ScanResult:
    """Scan a book as the model reads it after a change, so an instruction split across
    entries is seen whole.

    Contract: `texts` are the book's entries in prompt order *after* the change (the new or
    replaced text in its place, a removed one left out). They are joined with
    `BOOK_SEPARATOR` (a newline: the prompt puts each entry on its own line) and scanned as
    one text. Offsets index that joined text; each finding's `entries` lists the indexes of
    the entries its span touches. With `changed` (an index into `texts`), only findings
    that touch that entry count, so entries stored before the scanner learnt something new
    do not block every later write; the caller decides what to do about those. Never raises
    on content, only on an unknown `kind` or a `changed` outside `texts`."""
    _check_kind(kind)
    if changed is not None and not 0 <= changed < len(texts):
        raise ValueError(f"changed must index texts (0..{len(texts) - 1}), not {changed!r}")
    joined = BOOK_SEPARATOR.join(texts)
    if not joined:
        return ScanResult(allowed=True, findings=[], kind=kind)
    bounds, pos = [], 0
    for text in texts:
        bounds.append((pos, pos + len(text)))
        pos += len(text) + len(BOOK_SEPARATOR)
    raw, quiet = scan_raw(joined, kind=kind)
    findings = []
    for finding in select(joined, raw, quiet, cap=None):
        entries = tuple(
            i for i, (lo, hi) in enumerate(bounds) if finding.start < hi and lo < finding.end
        )
        if changed is None or changed in entries:
            findings.append(replace(finding, entries=entries))
    findings = cap_per_category(findings)
    return ScanResult(allowed=not findings, findings=findings, kind=kind)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
