"""The content a skill change would produce (a Draft), built from what was asked: a whole
SKILL.md, other files, a folder, an archive. Pure: validation only, no database writes."""

from skills.format import SKILL_FILE, check_files, content_hash, parse_skill_md
from skills.models import Skill, SkillVersion
from skills.scan import Draft


def whole(slug: str, text: str, files: dict, *, path=SKILL_FILE, before="", detail=None) -> Draft:
    parsed = parse_skill_md(text, expected_name=slug)
    return Draft(
        skill_md=text,
        files=files,
        front_matter=parsed.front_matter,
        path=path,
        before=before,
        after=text,
        detail=detail or {},
        scan=[(SKILL_FILE, text)],
    )


def with_files(
    current: SkillVersion,
    files: dict,
    *,
    path: str,
    before: str,
    after: str,
    binaries: dict | None = None,
):
    """The current SKILL.md with other text files (and, if given, other binaries)."""
    binaries = dict(current.binaries) if binaries is None else binaries
    return Draft(
        skill_md=current.skill_md,
        files=check_files(files, dict.fromkeys(binaries, 0)),
        binaries=binaries,
        front_matter=current.front_matter,
        path=path,
        before=before,
        after=after,
        scan=[(path, after)] if after else [],
    )


def folder(slug: str, text: str, files: dict, current: SkillVersion | None) -> Draft:
    """A whole SKILL.md with all its (checked) files: the supporting files that are new or
    changed since `current` are scanned too."""
    draft = whole(slug, text, files, before=current.skill_md if current else "")
    draft.scan += [
        (path, content)
        for path, content in files.items()
        if current is None or current.files.get(path) != content
    ]
    return draft


def archived(skill: Skill, current: SkillVersion) -> Draft:
    """The current content, archived (a delete)."""
    return Draft(
        skill_md=current.skill_md,
        files=current.files,
        front_matter=current.front_matter,
        archive=True,
    )


def binaries_of(draft: Draft, current: SkillVersion | None) -> dict:
    """The draft's binary files: its own, or (None) the current version's, unchanged."""
    if draft.binaries is None:
        draft.binaries = dict(current.binaries) if current is not None else {}
    return draft.binaries


def draft_hash(draft: Draft, current: SkillVersion | None) -> str:
    return content_hash(draft.skill_md, draft.files, binaries_of(draft, current))


def same_origin(skill: Skill, current: SkillVersion | None, origin: dict | None) -> bool:
    """Whether an import from `origin` continues `skill` rather than clashing with it: the
    same import root (names are unique within one import, so a folder that moved inside the
    collection is still the same skill)."""
    if origin is None:
        return True
    if not skill.origin:  # recorded before origins were: an imported skill continues
        return current is not None and current.change == "import"
    return skill.origin.get("root") is not None and skill.origin.get("root") == origin.get("root")
