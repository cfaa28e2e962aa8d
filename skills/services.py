"""Every write to skills: the agent's changes, imports, and decisions by people.

Each change runs in one transaction under a row lock on the skill: it validates the new
content, scans it, and then creates one new SkillVersion (or, when policy says a reviewer
decides, one SkillProposal), with its SkillEvent in the same transaction. `(skill, number)`
is unique, so two writers that raced anyway conflict instead of losing an update. A write
the scanner blocks stores nothing but a `blocked` event: the previous version stays current.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from chats.agent.registry import ORIGIN_CHAT, ORIGIN_REVIEW
from chats.models import Actor, Chat, Turn
from hermes_site.scanning import scan_text
from skills import scope, signals
from skills.format import (
    SKILL_FILE,
    SkillFormatError,
    check_category,
    check_file_content,
    check_files,
    check_name,
    content_hash,
    normalise_path,
    parse_skill_md,
)
from skills.matching import PatchError, apply_patch
from skills.models import Skill, SkillEvent, SkillProposal, SkillUsage, SkillVersion, Via

Kind = SkillEvent.Kind
MAX_AUDIT_TEXT = 20_000
KIND_OF_ACTION = {
    "create": Kind.CREATE,
    "patch": Kind.PATCH,
    "edit": Kind.EDIT,
    "delete": Kind.ARCHIVE,
    "write_file": Kind.FILE_WRITE,
    "remove_file": Kind.FILE_REMOVE,
    "rollback": Kind.ROLLBACK,
    "import": Kind.IMPORT,
}


class SkillNotAllowed(PermissionError):
    """The person may not do this to skills (not a skill reviewer)."""


class SkillConflict(Exception):
    """The skill or proposal is not in the state the caller saw; nothing changed."""


class SkillStale(SkillConflict):
    """The skill changed after the version the caller saw; nothing changed."""


class SkillInvalid(ValueError):
    """The change was refused (format, scanner); nothing changed but an audit event."""


@dataclass(frozen=True)
class Author:
    """Who asks for a change, and where: the turn in an agent write, a person elsewhere."""

    actor: Actor | None = None
    person: object = None
    chat: Chat | None = None
    turn: Turn | None = None
    via: str = Via.AGENT
    reason: str = ""
    origin: str = ORIGIN_CHAT  # ORIGIN_REVIEW: a background review, whose changes always wait
    review_id: int | None = None  # that review (linked from the proposal)


@dataclass
class Outcome:
    """What a change did, in words the model can act on."""

    code: str  # applied, proposed, unchanged, blocked, invalid, not_found, conflict
    message: str
    skill: Skill | None = None
    version: SkillVersion | None = None
    proposal: SkillProposal | None = None
    findings: list = field(default_factory=list)

    @property
    def stored(self) -> bool:
        return self.code in ("applied", "proposed")


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


class _Refused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _cut(text: str) -> str:
    return text if len(text) <= MAX_AUDIT_TEXT else text[:MAX_AUDIT_TEXT] + "…"


def _event(
    *,
    kind: str,
    slug: str,
    author: Author,
    skill: Skill | None = None,
    version: SkillVersion | None = None,
    proposal: SkillProposal | None = None,
    person=None,
    path: str = "",
    before: str = "",
    after: str = "",
    detail: dict | None = None,
) -> SkillEvent:
    return SkillEvent.objects.create(
        skill=skill,
        slug=slug,
        kind=kind,
        via=author.via,
        version=version,
        proposal=proposal,
        actor=author.actor,
        person=person if person is not None else author.person,
        chat=author.chat,
        turn=author.turn,
        path=path,
        before=_cut(before),
        after=_cut(after),
        detail=detail or {},
    )


def _key(finding) -> tuple[str, str, str]:
    return (finding.category, finding.reason, finding.excerpt)


def _scan(draft: Draft, current: SkillVersion | None = None) -> list[dict]:
    """The findings that block `draft`. A finding the current version already had (same
    category, reason and excerpt: stored before the scanner learnt that rule) does not block
    a change elsewhere in the text; it is kept in `draft.detail` for the audit row."""
    findings = []
    for path, text in draft.scan:
        result = scan_text(text, kind="skill")
        if result.allowed:
            continue
        new = result.findings
        before = None
        if current is not None:
            before = current.skill_md if path == SKILL_FILE else current.files.get(path)
        if before:
            known = {_key(f) for f in scan_text(before, kind="skill").findings}
            new = [f for f in result.findings if _key(f) not in known]
            old = [f"{f.category}: {f.reason}" for f in result.findings if _key(f) in known]
            if old:
                draft.detail.setdefault("pre_existing_findings", {})[path] = old
        if new:
            blocked = type(result)(allowed=False, findings=new, kind=result.kind)
            findings.append({"path": path, "summary": blocked.summary()})
    return findings


def _lock(slug: str) -> Skill | None:
    return Skill.objects.select_for_update().filter(slug=slug).first()


def _apply(
    *,
    skill: Skill | None,
    slug: str,
    category: str,
    action: str,
    draft: Draft,
    author: Author,
    reason: str,
    owner: "scope.Owner | None" = None,
) -> tuple[Skill, SkillVersion | None]:
    """Store `draft` as the skill's next version (or archive it), with its audit event; a new
    skill is `owner`'s personal skill when given, else a team skill."""
    now = timezone.now()
    current = skill.current_version if skill is not None else None
    if skill is None:
        personal = owner.fields() if owner is not None else {}
        skill = Skill.objects.create(slug=slug, category=category, created_at=now, **personal)
    elif action == "import" and category:
        skill.category = category  # a folder moved to another category in the import
    version = None
    if draft.archive:
        skill.status = Skill.Status.ARCHIVED
    else:
        version = SkillVersion.objects.create(
            skill=skill,
            number=(current.number if current else 0) + 1,
            change=action,
            skill_md=draft.skill_md,
            front_matter=draft.front_matter,
            files=draft.files,
            content_hash=content_hash(draft.skill_md, draft.files),
            author_actor=author.actor,
            author_person=author.person,
            source_chat=author.chat,
            source_turn=author.turn,
            reason=reason,
            created_at=now,
        )
        skill.current_version = version
        skill.description = draft.front_matter.get("description", "")[:1024]
        if skill.status == Skill.Status.STALE:
            skill.status = Skill.Status.ACTIVE
    skill.updated_at = now
    skill.save()
    detail = dict(draft.detail)
    if current is not None:
        detail["from_version"] = current.number
    if version is not None:
        detail["to_version"] = version.number
    _event(
        kind=KIND_OF_ACTION[action],
        slug=slug,
        author=author,
        skill=skill,
        version=version or current,
        path=draft.path,
        before=draft.before,
        after=draft.after,
        detail=detail,
    )
    # Proposals based on an older version can no longer be approved as they were shown, nor
    # can a proposal to create this skill that was waiting while it came into being.
    SkillProposal.objects.filter(
        Q(skill=skill) | Q(skill__isnull=True, slug=slug), status=SkillProposal.Status.PENDING
    ).update(status=SkillProposal.Status.SUPERSEDED)
    return skill, version


def _describe(skill: Skill, version: SkillVersion | None, action: str, draft: Draft) -> str:
    if draft.archive:
        return (
            f"Archived {skill.slug}: it left the skills index; a skill reviewer can restore it. "
            "Its versions are kept."
        )
    matched = draft.detail.get("match")
    how = f", matched {matched}" if matched and matched != "exact" else ""
    return (
        f"Applied: {skill.slug} is now version {version.number} ({action}{how}). The skills "
        "index shows it from the next message on."
    )


def _waiting_proposal(
    slug: str, author: Author, draft: Draft, current: SkillVersion | None
) -> Outcome | None:
    """A proposal that makes this one pointless: the same content already waits (from anyone),
    or, for a background review, any change of the skill waits (approving one supersedes the
    others, so a pile of them only costs reviewers time)."""
    pending = SkillProposal.objects.filter(slug=slug, status=SkillProposal.Status.PENDING)
    same = pending.filter(
        base_number=current.number if current else None,
        content_hash=content_hash(draft.skill_md, draft.files),
        skill_md=draft.skill_md,
    ).first()
    if same is not None:
        return Outcome(
            "proposed",
            f"Already proposed as change #{same.pk} to {slug}, with this very content: a skill "
            "reviewer decides, nothing changed yet. Do not send it again.",
            proposal=same,
        )
    other = pending.order_by("created_at", "id").first() if author.origin == ORIGIN_REVIEW else None
    if other is not None:
        return Outcome(
            "conflict",
            f"Error: change #{other.pk} to {slug} ({other.action}) already waits for a skill "
            "reviewer. Nothing was stored: propose again once it is decided, or save "
            "something else.",
        )
    return None


def _change(
    *,
    slug: str,
    action: str,
    author: Author,
    build: Callable[[Skill | None, SkillVersion | None], Draft],
    base_version: int | None = None,
    category: str = "",
    apply_now: bool | None = None,
    strict_scan: bool = False,
    asked_scope: str = "",
) -> Outcome:
    """Validate, scan and apply (or propose) one change under the skill's row lock; where it
    lands (applied or proposed, team or personal) is `skills.scope.place`'s decision. With
    `strict_scan`, a finding the current version already had blocks too."""
    try:
        slug = check_name(slug)
        category = check_category(category)
    except SkillFormatError as exc:
        return Outcome("invalid", f"Error: {exc}")
    try:
        with transaction.atomic():
            skill = _lock(slug)
            current = skill.current_version if skill is not None else None
            placement = _placement(author, skill, action, apply_now, asked_scope)
            if action in ("create", "import") and skill is None:
                pass
            elif action == "create":
                raise _Refused(
                    "conflict",
                    f"Error: a skill named {slug!r} already exists (version "
                    f"{current.number if current else 0}, {skill.status}). View it and patch "
                    "or edit it, or choose another name.",
                )
            elif skill is None:
                raise _Refused(
                    "not_found",
                    f"Error: there is no skill named {slug!r}. Call skills_list to see the "
                    "names, or create it.",
                )
            elif skill.status == Skill.Status.ARCHIVED and action not in ("rollback", "import"):
                raise _Refused(
                    "invalid",
                    f"Error: {slug} is archived; a skill reviewer can restore it before it "
                    "changes again.",
                )
            if base_version is not None and current is not None and base_version != current.number:
                raise _Refused(
                    "conflict",
                    f"Error: {slug} changed since version {base_version}: it is at version "
                    f"{current.number} now. View it again and redo your change on the current "
                    "text.",
                )
            try:
                draft = build(skill, current)
            except (SkillFormatError, PatchError) as exc:
                raise _Refused("invalid", f"Error: {exc} Nothing was changed.") from None
            if (
                current is not None
                and not draft.archive
                and draft.skill_md == current.skill_md
                and draft.files == current.files
            ):
                return Outcome(
                    "unchanged",
                    f"Unchanged: {slug} version {current.number} already has this content.",
                    skill=skill,
                    version=current,
                )
            findings = _scan(draft, None if strict_scan else current)
            if findings:
                _event(
                    kind=Kind.BLOCKED,
                    slug=slug,
                    author=author,
                    skill=skill,
                    version=current,
                    path=findings[0]["path"],
                    after=draft.after,
                    detail={"action": action, "findings": findings},
                )
                where = "; ".join(f"{f['path']}: {f['summary']}" for f in findings)
                kept = f"{slug} stays at version {current.number}" if current else "nothing"
                return Outcome(
                    "blocked",
                    f"Error: {where}. Nothing was stored ({kept}). Remove that content "
                    "and retry; a skill that needs a secret names where it comes from.",
                    skill=skill,
                    version=current,
                    findings=findings,
                )
            if placement.apply_now:
                skill, version = _apply(
                    skill=skill,
                    slug=slug,
                    category=category,
                    action=action,
                    draft=draft,
                    author=author,
                    reason=author.reason,
                    owner=placement.personal,
                )
                return Outcome(
                    "applied",
                    _describe(skill, version, action, draft) + scope.describe(placement),
                    skill=skill,
                    version=version or current,
                )
            waiting = _waiting_proposal(slug, author, draft, current)
            if waiting is not None:
                return waiting
            _pending_limit(author)
            proposal = SkillProposal.objects.create(
                skill=skill,
                slug=slug,
                category=category if skill is None else skill.category,
                action=action,
                base_number=current.number if current else None,
                skill_md=draft.skill_md,
                front_matter=draft.front_matter,
                files=draft.files,
                content_hash=content_hash(draft.skill_md, draft.files),
                author_actor=author.actor,
                author_person=author.person,
                source_chat=author.chat,
                source_turn=author.turn,
                reason=author.reason,
                via=author.via,
                review_id=author.review_id,
            )
            _event(
                kind=Kind.PROPOSED,
                slug=slug,
                author=author,
                skill=skill,
                version=current,
                proposal=proposal,
                path=draft.path,
                before=draft.before,
                after=draft.after,
                detail={"action": action, **draft.detail},
            )
            transaction.on_commit(
                lambda: signals.proposal_created.send(sender=SkillProposal, proposal=proposal)
            )
            base = f"version {current.number}" if current else "a new skill"
            return Outcome(
                "proposed",
                f"Proposed as change #{proposal.pk} to {slug} (based on {base}): a skill "
                "reviewer decides, nothing changed yet. Do not send it again.",
                skill=skill,
                version=current,
                proposal=proposal,
            )
    except _Refused as refused:
        return Outcome(refused.code, str(refused))
    except IntegrityError:
        return Outcome(
            "conflict",
            f"Error: another change of {slug} was saved at the same moment. View it again and "
            "redo your change on the current text.",
        )


def _placement(
    author: Author, skill: Skill | None, action: str, apply_now, asked_scope: str
) -> "scope.Placement":
    """`scope.place`, its refusal turned into this module's."""
    try:
        return scope.place(
            author=author, skill=skill, action=action, apply_now=apply_now, asked_scope=asked_scope
        )
    except scope.ScopeRefused as refused:
        raise _Refused(refused.code, str(refused)) from None


def _pending_limit(author: Author) -> None:
    try:
        scope.check_pending_limit(author)
    except scope.ScopeRefused as refused:
        raise _Refused(refused.code, str(refused)) from None


# --- Drafts ------------------------------------------------------------------------------


def _whole(slug: str, text: str, files: dict, *, path=SKILL_FILE, before="", detail=None) -> Draft:
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


def _with_files(current: SkillVersion, files: dict, *, path: str, before: str, after: str):
    return Draft(
        skill_md=current.skill_md,
        files=check_files(files),
        front_matter=current.front_matter,
        path=path,
        before=before,
        after=after,
        scan=[(path, after)] if after else [],
    )


def _folder(slug: str, text: str, files: dict, current: SkillVersion | None) -> Draft:
    """A whole SKILL.md with all its (checked) files: the supporting files that are new or
    changed since `current` are scanned too."""
    draft = _whole(slug, text, files, before=current.skill_md if current else "")
    draft.scan += [
        (path, content)
        for path, content in files.items()
        if current is None or current.files.get(path) != content
    ]
    return draft


def _archived(skill: Skill, current: SkillVersion) -> Draft:
    """The current content, archived (a delete)."""
    return Draft(
        skill_md=current.skill_md,
        files=current.files,
        front_matter=current.front_matter,
        archive=True,
    )


# --- The agent's changes -----------------------------------------------------------------


def skill_create(
    *, name: str, content: str, author: Author, category: str = "", scope: str = ""
) -> Outcome:
    """Create skill `name` from a whole SKILL.md whose `name` is the same slug; `scope`
    ("personal", "team", or "" for the default) as `skills.scope.place` allows it."""
    return _change(
        slug=name,
        action="create",
        author=author,
        category=category,
        build=lambda skill, current: _whole(name, content, {}),
        asked_scope=scope,
    )


def skill_edit(
    *, name: str, content: str, author: Author, base_version: int | None = None
) -> Outcome:
    """Replace the whole SKILL.md of `name` (its front matter `name` must stay the same)."""
    return _change(
        slug=name,
        action="edit",
        author=author,
        base_version=base_version,
        build=lambda skill, current: _whole(name, content, current.files, before=current.skill_md),
    )


def skill_patch(
    *,
    name: str,
    old_string: str,
    new_string: str,
    author: Author,
    replace_all: bool = False,
    file_path: str = "",
    base_version: int | None = None,
) -> Outcome:
    """Replace `old_string` by `new_string` in SKILL.md (or a supporting file), matched
    tolerantly (skills.matching); the result must still be a valid skill."""

    def build(skill: Skill, current: SkillVersion) -> Draft:
        if not file_path or file_path == SKILL_FILE:
            patched = apply_patch(current.skill_md, old_string, new_string, replace_all=replace_all)
            detail = {"match": patched.level, "replaced": patched.count}
            try:
                draft = _whole(name, patched.text, current.files, detail=detail)
            except SkillFormatError as exc:
                raise SkillFormatError(f"the patched SKILL.md would be invalid: {exc}") from None
            draft.before, draft.after = old_string, new_string
            return draft
        path = normalise_path(file_path)
        if path not in current.files:
            raise _missing_file(name, path, current)
        patched = apply_patch(current.files[path], old_string, new_string, replace_all=replace_all)
        files = {**current.files, path: check_file_content(path, patched.text)}
        draft = _with_files(current, files, path=path, before=old_string, after=patched.text)
        draft.after, draft.detail = new_string, {"match": patched.level, "replaced": patched.count}
        draft.scan = [(path, patched.text)]
        return draft

    return _change(slug=name, action="patch", author=author, base_version=base_version, build=build)


def _missing_file(name: str, path: str, current: SkillVersion) -> _Refused:
    listed = ", ".join(sorted(current.files)) or "none"
    return _Refused("not_found", f"Error: {name} has no file {path!r}. Its files: {listed}.")


def skill_file_write(
    *, name: str, file_path: str, file_content: str, author: Author, base_version=None
) -> Outcome:
    """Create or replace one supporting file of `name` (text, under the allowed folders)."""

    def build(skill: Skill, current: SkillVersion) -> Draft:
        path = normalise_path(file_path)
        content = check_file_content(path, file_content)
        files = {**current.files, path: content}
        return _with_files(
            current, files, path=path, before=current.files.get(path, ""), after=content
        )

    return _change(
        slug=name, action="write_file", author=author, base_version=base_version, build=build
    )


def skill_file_remove(
    *, name: str, file_path: str, author: Author, base_version: int | None = None
) -> Outcome:
    """Remove one supporting file of `name`."""

    def build(skill: Skill, current: SkillVersion) -> Draft:
        path = normalise_path(file_path)
        if path not in current.files:
            raise _missing_file(name, path, current)
        files = {key: value for key, value in current.files.items() if key != path}
        return _with_files(current, files, path=path, before=current.files[path], after="")

    return _change(
        slug=name, action="remove_file", author=author, base_version=base_version, build=build
    )


def skill_delete(*, name: str, author: Author, base_version: int | None = None) -> Outcome:
    """Archive `name` (recoverable: a skill reviewer restores it; versions are kept)."""
    return _change(
        slug=name, action="delete", author=author, base_version=base_version, build=_archived
    )


def skill_import(*, name: str, content: str, files: dict, category: str, author: Author) -> Outcome:
    """Create or update `name` from a folder's content; unchanged content (same hash) stores
    nothing. Validated and scanned like any write; applies at once (an operator's act)."""
    try:
        checked = check_files(files)
    except SkillFormatError as exc:
        return Outcome("invalid", f"Error: {exc}")

    return _change(
        slug=name,
        action="import",
        author=author,
        category=category,
        build=lambda skill, current: _folder(name, content, checked, current),
        apply_now=True,
    )


def skill_propose(
    *,
    name: str,
    action: str,
    author: Author,
    base_version: int,
    content: str = "",
    files: dict | None = None,
) -> Outcome:
    """A system change (the curator's merges) that always waits for a skill reviewer,
    whatever SKILLS_APPROVAL says: `edit` (the whole SKILL.md, and `files` if given) or
    `delete` (archive), validated like any write and scanned strictly (a finding the current
    version already had blocks too); stores one pending proposal, or only a `blocked` event."""
    if action not in ("edit", "delete"):
        raise ValueError("a system proposal is an edit or a delete")

    def build(skill: Skill, current: SkillVersion) -> Draft:
        if action == "delete":
            return _archived(skill, current)
        return _folder(
            name, content, check_files(current.files if files is None else files), current
        )

    return _change(
        slug=name,
        action=action,
        author=author,
        base_version=base_version,
        build=build,
        apply_now=False,
        strict_scan=True,
    )


def skill_usage_record(
    *,
    skill: Skill,
    version: SkillVersion | None,
    path: str = "",
    chat: Chat | None = None,
    turn: Turn | None = None,
    actor: Actor | None = None,
) -> SkillUsage:
    """Record that a turn loaded `skill` (its SKILL.md, or the file at `path`); a stale skill
    becomes active again in the same transaction, under its row lock, with a `reactivate`
    event (via system). An archived one stays archived: only a reviewer restores it."""
    with transaction.atomic():
        # The lock orders this use against a curator run marking the skill stale meanwhile.
        locked = Skill.objects.select_for_update().filter(pk=skill.pk).first()
        usage = SkillUsage.objects.create(
            skill=skill, version=version, path=path, chat=chat, turn=turn, actor=actor
        )
        if locked is not None and locked.status == Skill.Status.STALE:
            locked.status, locked.updated_at = Skill.Status.ACTIVE, usage.created_at
            locked.save(update_fields=["status", "updated_at"])
            skill.status = locked.status
            _event(
                kind=Kind.REACTIVATE,
                slug=locked.slug,
                author=Author(actor=actor, chat=chat, turn=turn, via=Via.SYSTEM),
                skill=locked,
                version=version or locked.current_version,
                path=path or SKILL_FILE,
                detail={
                    "from": Skill.Status.STALE,
                    "to": Skill.Status.ACTIVE,
                    "reason": "loaded by a turn",
                },
            )
    return usage
