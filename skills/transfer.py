"""Folders of SKILL.md skills on disk: read for `import_skills`, written by `export_skills`.

Every folder holding a SKILL.md is a skill, at any depth under the import root (`root` itself
may be one). Its files are everything under it, at any depth, except what lies inside a
deeper skill folder (Hermes nests skills in skills: `hermes-agent/self-restart/`). Its
category is the path between the root and the skill folder (`mlops/inference` for
`mlops/inference/vllm/`); hidden folders (`.curated/`, `.system/`) are walked but never
become category names. Text files (UTF-8 without NUL) and binary files are read as bytes and
kept exactly (no newline translation), so export then import is lossless. Symbolic links are
never followed (a linked SKILL.md refuses its skill), hidden files inside a skill are
skipped, and nothing is skipped without a line saying why. Nothing is written outside the
export target.
"""

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hermes_site.scanning.engine import scan_raw
from hermes_site.scanning.result import Finding, select
from skills.blobs import blob_bytes
from skills.format import (
    BINARY_MAX_BYTES,
    MAX_FILES,
    SKILL_FILE,
    SKILL_MAX_BYTES,
    SkillFormatError,
    check_category,
    is_binary,
    normalise_path,
)
from skills.models import Skill

IGNORED_DIRS = {".git", ".hg", ".svn"}  # version control data: never skills, never walked
NESTED_PREFIX = ".nested"  # export: a skill whose usual folder would be ambiguous


@dataclass
class FolderSkill:
    """One skill folder found under the import root, and what reading it gave."""

    slug: str
    category: str
    path: str  # the folder, relative to the import root ("." for the root itself)
    skill_md: str = ""
    files: dict = field(default_factory=dict)  # {path: text}
    binaries: dict = field(default_factory=dict)  # {path: bytes}
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    error: str = ""  # set: the skill is refused without being imported
    _folder: Path | None = None
    _entries: list[tuple[str, Path]] = field(default_factory=list)


@dataclass
class Discovery:
    skills: list[FolderSkill]
    skipped: list[tuple[str, str]]  # (path under the root, why): links not followed


def _hidden(part: str) -> bool:
    return part.startswith(".") and part not in (".", "..")


def _category(relative: PurePosixPath) -> str:
    return "/".join(part for part in relative.parent.parts if not _hidden(part))


def _is_link(path: Path) -> bool:
    return stat.S_ISLNK(os.lstat(path).st_mode)


def discover(root: Path) -> Discovery:
    """Every skill folder under `root`, each with the files it owns (not yet read), sorted
    by path; and the symbolic links that were not followed."""
    root = Path(root)
    owners: dict[str, FolderSkill | None] = {}
    found: list[FolderSkill] = []
    skipped: list[tuple[str, str]] = []
    for current, dirs, names in os.walk(root, followlinks=False):
        here = Path(current)
        relative = here.relative_to(root).as_posix()
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS)
        for name in list(dirs):
            if _is_link(here / name):
                dirs.remove(name)
                where = (here / name).relative_to(root).as_posix()
                skipped.append((where, "a symbolic link to a folder, not followed"))
        owner = owners.get(PurePosixPath(relative).parent.as_posix()) if relative != "." else None
        if SKILL_FILE in names:
            name = root.resolve().name if relative == "." else here.name
            owner = FolderSkill(
                slug=name,
                category="" if relative == "." else _category(PurePosixPath(relative)),
                path=relative,
                _folder=here,
            )
            found.append(owner)
        owners[relative] = owner
        for name in sorted(names):
            path = here / name
            if owner is None:
                if _is_link(path):
                    where = path.relative_to(root).as_posix()
                    skipped.append((where, "a symbolic link, not followed"))
                continue
            inside = path.relative_to(owner._folder).as_posix()
            if inside != SKILL_FILE:
                owner._entries.append((inside, path))
    return Discovery(skills=sorted(found, key=lambda s: s.path), skipped=skipped)


def read_skill(skill: FolderSkill) -> FolderSkill:
    """Read the SKILL.md and files of a discovered skill; a problem that makes it unsafe or
    unstorable sets `error`, a hidden file or a link is added to `skipped`."""
    skill_file = skill._folder / SKILL_FILE
    if _is_link(skill_file):
        skill.error = "SKILL.md is a symbolic link: links are never followed; copy the file in."
        return skill
    try:
        skill.category = check_category(skill.category)
    except SkillFormatError as exc:
        skill.error = f"its folder path gives an invalid category: {exc}"
        return skill
    try:
        skill.skill_md = skill_file.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        skill.error = "SKILL.md is not UTF-8 text."
        return skill
    problems, total = [], 0
    for inside, path in skill._entries:
        if any(_hidden(part) for part in inside.split("/")):
            skill.skipped.append((inside, "a hidden file"))
            continue
        if _is_link(path):
            skill.skipped.append((inside, "a symbolic link, not followed"))
            continue
        try:
            normal = normalise_path(inside)
        except SkillFormatError as exc:
            problems.append(f"{inside}: {exc}")
            continue
        if not path.is_file():
            skill.skipped.append((inside, "not a regular file"))
            continue
        if len(skill.files) + len(skill.binaries) >= MAX_FILES:
            problems.append(f"more than {MAX_FILES} files: a skill may have at most {MAX_FILES}.")
            break
        size = path.stat().st_size
        if size > BINARY_MAX_BYTES:  # never read what cannot be stored
            problems.append(
                f"{inside}: {size:,} bytes; a file may have at most {BINARY_MAX_BYTES:,} (16 MiB)."
            )
            continue
        total += size
        if total > SKILL_MAX_BYTES:
            problems.append(
                f"its files have more than {SKILL_MAX_BYTES:,} bytes in all (64 MiB), the most "
                "a skill may have."
            )
            break
        data = path.read_bytes()
        if is_binary(data):
            skill.binaries[normal] = data
        else:
            skill.files[normal] = data.decode("utf-8")
    if problems:
        skill.error = " ".join(problems)
    return skill


def _all_findings(text: str) -> list[Finding]:
    """Every finding in `text`, uncapped (the scan that blocks a write keeps ten per
    category; a person fixing a skill needs all of them at once)."""
    raw, quiet = scan_raw(text, kind="skill")
    return select(text, raw, quiet, cap=None)


def _key(finding: Finding) -> tuple[str, str, str]:
    return (finding.category, finding.reason, finding.excerpt)


def finding_lines(skill: FolderSkill, outcome) -> list[dict]:
    """Every finding that blocked `skill`'s import, as {file, line, category, reason,
    excerpt}: the files the block names, rescanned in full, less what the current version
    already had (which did not block). A block this rescan cannot place in a file's text
    keeps its summary, with no line."""
    current = outcome.version
    rows = []
    for blocked in outcome.findings:
        path = blocked["path"]
        text = skill.skill_md if path == SKILL_FILE else skill.files.get(path, "")
        before = None
        if current is not None:
            before = current.skill_md if path == SKILL_FILE else current.files.get(path)
        known = {_key(f) for f in _all_findings(before)} if before else set()
        found = [f for f in _all_findings(text) if _key(f) not in known] if text else []
        if not found:  # what was blocked is not a file's text (say, a file name): as given
            rows.append(
                {
                    "file": path,
                    "line": None,
                    "category": "",
                    "reason": blocked.get("summary", ""),
                    "excerpt": "",
                }
            )
        for finding in found:
            rows.append(
                {
                    "file": path,
                    "line": text.count("\n", 0, finding.start) + 1,
                    "category": finding.category,
                    "reason": finding.reason,
                    "excerpt": finding.excerpt,
                }
            )
    return rows


def _inside(base: Path, relative: str) -> Path:
    target = (base / relative).resolve()
    if not target.is_relative_to(base.resolve()):
        raise SkillFormatError(f"{relative} would leave the skill folder")
    return target


def _owned_paths(skill: Skill) -> list[str]:
    version = skill.current_version
    return [*version.files, *version.binaries]


def _clashes(folder: str, files: list[str], other: str, other_files: list[str]) -> bool:
    """Whether skill folders `folder` and `other` (paths under the export root) would be
    read back differently: one lies inside the other where the outer one has a file (or
    needs a folder where the other has a file)."""
    for outer, outer_files, inner in ((folder, files, other), (other, other_files, folder)):
        if not inner.startswith(outer + "/"):
            continue
        below = inner[len(outer) + 1 :]
        steps = below.split("/")
        prefixes = {"/".join(steps[: n + 1]) for n in range(len(steps))}
        if any(path in prefixes or path.startswith(below + "/") for path in outer_files):
            return True
    return False


def export_folders(skills: list[Skill]) -> dict[int, str]:
    """{skill id: folder under the export root}. Usually `category/slug`; a skill whose
    folder would fall inside another skill's folder where that one has files (`ops` with
    `scripts/x.md`, and `x` in category `ops/scripts`) goes under a hidden `.nested…`
    folder instead, which import walks but never counts as a category: every skill and
    file comes back as it was."""
    placed: list[tuple[str, list[str]]] = []
    folders: dict[int, str] = {}
    for skill in sorted(skills, key=lambda s: (s.category.count("/"), s.category, s.slug)):
        usual = f"{skill.category}/{skill.slug}" if skill.category else skill.slug
        files = _owned_paths(skill)
        for attempt in range(len(skills) + 1):
            prefix = "" if attempt == 0 else f"{NESTED_PREFIX}-{attempt}/"
            folder = prefix + usual
            if not any(_clashes(folder, files, other, theirs) for other, theirs in placed):
                break
        placed.append((folder, files))
        folders[skill.pk] = folder
    return folders


def _write_bytes(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as handle:
        handle.write(data)


def write_skill_folder(root: Path, skill: Skill, folder: str | None = None) -> Path:
    """Write the current version of `skill` (SKILL.md, text files, binaries byte for byte)
    to `root/folder` (default `root/[category/]slug/`) and return that folder."""
    root = Path(root)
    if folder is None:
        folder = f"{skill.category}/{skill.slug}" if skill.category else skill.slug
    target = _inside(root, folder)
    version = skill.current_version
    _write_bytes(target / SKILL_FILE, version.skill_md.encode("utf-8"))
    for relative, text in version.files.items():
        _write_bytes(_inside(target, normalise_path(relative)), text.encode("utf-8"))
    for relative, sha in version.binaries.items():
        _write_bytes(_inside(target, normalise_path(relative)), blob_bytes(sha))
    return target
