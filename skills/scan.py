"""What a skill write makes the model read, and the scan of it.

The scanner (`hermes_site.scanning`) reads text; this module decides which texts a change
puts in front of the model, so that what is scanned is what is used: the raw SKILL.md and
supporting files, the front matter after YAML decoding (the index and `skills_list` show the
decoded values, not the raw text), the description as the index line shows it, and every new
file name (`skill_view` lists them), each also read as words (`ignore_all-previous.md`).
What a skill can run is the concatenation of its files, so its text files are also read
together (`hermes_site.scanning.scan_skill_files`): a payload split across two files is
blocked though each file passes alone.
"""

import re
from dataclasses import dataclass, field

from hermes_site.scanning import ScanResult, scan_skill_files, scan_text
from skills.format import SKILL_FILE
from skills.models import SkillVersion

FRONT_MATTER_TARGET = f"{SKILL_FILE} front matter"
NAME_SEPARATORS = re.compile(r"[-_./]+")
ACROSS_FILES = "(across files"  # how scan_skill_files marks a finding only the join shows


@dataclass
class Draft:
    """The content a change would produce, and what the audit row says about it."""

    skill_md: str
    files: dict
    front_matter: dict
    archive: bool = False
    path: str = SKILL_FILE
    before: str = ""
    after: str = ""
    detail: dict = field(default_factory=dict)
    scan: list[tuple[str, str]] = field(default_factory=list)  # (path, text) to scan
    content_hash: str = ""  # computed while preparing, so never under the lock
    binaries: dict | None = None  # {path: sha256}; None keeps the current version's
    origin: dict | None = None  # where an import's content came from (Skill.origin)


def _key(finding) -> tuple[str, str, str]:
    return (finding.category, finding.reason, finding.excerpt)


def readable(name: str) -> str:
    """A slug or path as the words it spells: `ignore_all-previous.md` hides from a rule
    that wants spaces between words, `ignore all previous md` does not."""
    return NAME_SEPARATORS.sub(" ", name).strip()


def _front_matter_text(front: dict) -> str:
    """What the parsed front matter says, as the model reads it: every key and string value
    (nested ones too) after YAML decoding, one per line, the description as the index shows
    it (one line) and the name as words."""
    out: list[str] = []

    def walk(value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                out.append(str(key))
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            out.append(value)

    walk(front)
    description = front.get("description")
    if isinstance(description, str):
        out.append(" ".join(description.split()))  # skills.prompt's index line
    out.append(readable(str(front.get("name", ""))))
    return "\n".join(out)


def _scan_targets(draft: Draft, current: SkillVersion | None) -> list[tuple[str, str, str]]:
    """(where, text, the same place's text in `current` or "") for everything `draft` makes
    the model read that the scanner must see: the raw texts the caller listed, the parsed
    front matter whenever SKILL.md is among them (YAML decoding is not what the raw text
    shows), and every file name `current` did not have (skill_view lists the names)."""
    targets = []
    for path, text in draft.scan:
        before = ""
        if current is not None:
            before = current.skill_md if path == SKILL_FILE else current.files.get(path, "")
        targets.append((path, text, before or ""))
    if any(path == SKILL_FILE for path, _ in draft.scan):
        before = _front_matter_text(current.front_matter) if current is not None else ""
        targets.append((FRONT_MATTER_TARGET, _front_matter_text(draft.front_matter), before))
    old_paths = set(current.files) if current is not None else set()
    for path in draft.files:
        if path not in old_paths:
            targets.append((f"{path} (file name)", f"{path}\n{readable(path)}", ""))
    return targets


def scan_draft(draft: Draft, current: SkillVersion | None = None) -> list[dict]:
    """The findings that block `draft` (see _scan_targets for what is scanned). A finding
    the current version already had in the same place (same category, reason and excerpt:
    stored before the scanner learnt that rule) does not block a change elsewhere in the
    text; it is kept in `draft.detail` for the audit row."""
    findings = []
    for path, text, before in _scan_targets(draft, current):
        result = scan_text(text, kind="skill")
        if result.allowed:
            continue
        new = result.findings
        if before:
            known = {_key(f) for f in scan_text(before, kind="skill").findings}
            new = [f for f in result.findings if _key(f) not in known]
            old = [f"{f.category}: {f.reason}" for f in result.findings if _key(f) in known]
            if old:
                draft.detail.setdefault("pre_existing_findings", {})[path] = old
        if new:
            blocked = type(result)(allowed=False, findings=new, kind=result.kind)
            findings.append({"path": path, "summary": blocked.summary()})
    if not draft.archive and draft.files:
        findings += _scan_across_files(draft, current)
    return findings


def _across_files(skill_md: str, files: dict) -> dict[str, list]:
    """Per path, the findings only the skill's files read together show (each file alone is
    scanned as a target of its own)."""
    results = scan_skill_files({SKILL_FILE: skill_md, **files}, kind="skill")
    return {
        path: [f for f in result.findings if ACROSS_FILES in f.reason]
        for path, result in results.items()
    }


def _scan_across_files(draft: Draft, current: SkillVersion | None) -> list[dict]:
    """The findings that block `draft` because of what its text files say together (run on
    every change of a skill with supporting files: removing or adding one file can complete a
    payload as much as editing one). One the current version already had does not block."""
    new = _across_files(draft.skill_md, draft.files)
    if not any(new.values()):
        return []
    # Known by place and rule, not excerpt: a joined excerpt shows the neighbouring files'
    # text, which any other change of the skill moves.
    known = set()
    if current is not None and current.files:
        old = _across_files(current.skill_md, current.files)
        known = {(path, f.category, f.reason) for path, found in old.items() for f in found}
    blocked = []
    for path, found in new.items():
        fresh = [f for f in found if (path, f.category, f.reason) not in known]
        if fresh:
            result = ScanResult(allowed=False, findings=fresh, kind="skill")
            blocked.append({"path": path, "summary": result.summary()})
    return blocked
