"""Folders of SKILL.md skills on disk: read for `import_skills`, written by `export_skills`.

Layouts: `DIR/<name>/SKILL.md` (flat) or `DIR/<category>/<name>/SKILL.md` (as Hermes lays
them out), each with optional supporting files under references/, templates/, scripts/,
assets/. Bytes are kept exactly (no newline translation), so export then import is
lossless. Symbolic links are never followed, and nothing is written outside the target.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

from skills.format import SKILL_FILE, SkillFormatError, check_file_content, normalise_path
from skills.models import Skill


@dataclass
class FolderSkill:
    slug: str
    category: str
    skill_md: str
    files: dict = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # "path: why"
    error: str = ""


def _read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def _read_one(folder: Path, category: str) -> FolderSkill:
    skill = FolderSkill(slug=folder.name, category=category, skill_md="")
    try:
        skill.skill_md = _read_text(folder / SKILL_FILE)
    except UnicodeDecodeError:
        skill.error = "SKILL.md is not UTF-8 text"
        return skill
    for current, dirs, names in os.walk(folder, followlinks=False):
        here = Path(current)
        dirs.sort()
        for link in [d for d in dirs if (here / d).is_symlink()]:
            skill.skipped.append(f"{(here / link).relative_to(folder)}: a symbolic link")
            dirs.remove(link)
        for name in sorted(names):
            path = here / name
            relative = path.relative_to(folder).as_posix()
            if relative == SKILL_FILE:
                continue
            if path.is_symlink():
                skill.skipped.append(f"{relative}: a symbolic link")
                continue
            try:
                normal = normalise_path(relative)
                skill.files[normal] = check_file_content(normal, path.read_bytes())
            except SkillFormatError as exc:
                skill.skipped.append(f"{relative}: {exc}")
    return skill


def read_skill_folders(root: Path) -> list[FolderSkill]:
    """Every skill under `root` (flat or category/name layout; `root` itself may be one
    skill), sorted by category and name."""
    root = Path(root)
    if (root / SKILL_FILE).is_file():
        return [_read_one(root, "")]
    found = []
    for first in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if (first / SKILL_FILE).is_file():
            found.append(_read_one(first, ""))
            continue
        for second in sorted(p for p in first.iterdir() if p.is_dir() and not p.is_symlink()):
            if (second / SKILL_FILE).is_file():
                found.append(_read_one(second, first.name))
    return found


def _inside(base: Path, relative: str) -> Path:
    target = (base / relative).resolve()
    if not target.is_relative_to(base.resolve()):
        raise SkillFormatError(f"{relative} would leave the skill folder")
    return target


def write_skill_folder(root: Path, skill: Skill) -> Path:
    """Write the current version of `skill` to `root/[category/]slug/` and return that folder."""
    root = Path(root)
    folder = root / skill.category / skill.slug if skill.category else root / skill.slug
    _inside(root, folder.relative_to(root).as_posix())
    version = skill.current_version
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / SKILL_FILE, "w", encoding="utf-8", newline="") as handle:
        handle.write(version.skill_md)
    for relative, text in version.files.items():
        target = _inside(folder, normalise_path(relative))
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    return folder
