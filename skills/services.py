"""Every write to skills: the agent's changes, imports, and decisions by people.

A change runs in two phases (`_change`), so that no database lock is held while anything
is computed (a patch of a large skill, the scanner):

1. Prepare, without a lock or a transaction: decide the approval policy, read the current
   version, build the new content (a patch's result, whose size is checked before it is
   built), validate it and scan what the model will read (`skills.scan`: the SKILL.md,
   its parsed front matter, new file names, new or changed files).
2. Store, in one short transaction under a row lock on the skill: check that the skill is
   still at the version the draft was built on (else prepare again, at most
   PREPARE_ATTEMPTS in all, then answer a conflict), and create one new SkillVersion (or,
   when policy says a reviewer decides, one SkillProposal) with its SkillEvent.

`(skill, number)` is unique, so two writers that raced anyway conflict instead of losing an
update. A write the scanner blocks stores nothing but a `blocked` event: the previous
version stays current.
"""

from collections.abc import Callable

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from chats.agent.registry import ORIGIN_REVIEW
from chats.models import Actor, Chat, Turn
from skills import drafts, scope, signals
from skills.blobs import blob_sha256, skill_blobs_store
from skills.diff import content_diff_cached
from skills.format import (
    BODY_MAX,
    FILE_MAX_BYTES,
    FRONT_MATTER_MAX,
    SKILL_FILE,
    SkillFormatError,
    check_binary,
    check_category,
    check_file_content,
    check_files,
    check_name,
    normalise_path,
    required_tools,
)
from skills.matching import PatchError, apply_patch
from skills.models import Skill, SkillEvent, SkillProposal, SkillUsage, SkillVersion, Via
from skills.outcomes import (  # noqa: F401 (re-exported: callers import them from here)
    Author,
    Outcome,
    SkillConflict,
    SkillInvalid,
    SkillNotAllowed,
    SkillStale,
    describe_applied,
    state_refusal,
)
from skills.outcomes import Moved as _Moved
from skills.outcomes import Refused as _Refused
from skills.scan import Draft, readable, scan_draft

Kind = SkillEvent.Kind
MAX_AUDIT_TEXT = 20_000
# The longest SKILL.md that can be valid (front matter, body, the `---` lines, a BOM): a
# patch whose result would be longer is refused before the result is built.
MAX_SKILL_MD_CHARS = FRONT_MATTER_MAX + BODY_MAX + 16
PREPARE_ATTEMPTS = 3  # a draft built on a version that moved meanwhile is built again
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


def _author_origin(author: Author) -> dict:
    """Where a skill that no import brought comes from: how, and who asked."""
    origin = {"via": author.via}
    if author.person is not None:
        origin["person_id"] = author.person.pk
    if author.actor is not None:
        origin["actor_id"] = author.actor.pk
    return origin


def _blocked_before(slug: str, action: str, blocked_hash: str) -> bool:
    """An import blocked again with the very content whose block is the skill's last event:
    the audit trail already says so, and a nightly re-import must not add a row each time."""
    if action != "import":
        return False
    last = SkillEvent.objects.filter(slug=slug).order_by("-created_at", "-id").first()
    return (
        last is not None
        and last.kind == Kind.BLOCKED
        and last.detail.get("action") == action
        and last.detail.get("content_hash") == blocked_hash
    )


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
    sources=None,
) -> tuple[Skill, SkillVersion | None]:
    """Store `draft` as the skill's next version (or archive it), with its audit event; a new
    skill is `owner`'s personal skill when given, else a team skill."""
    now = timezone.now()
    current = skill.current_version if skill is not None else None
    if skill is None:
        origin = draft.origin or _author_origin(author)
        personal = owner.fields() if owner is not None else {}
        skill = Skill.objects.create(
            slug=slug, category=category, origin=origin, created_at=now, **personal
        )
    elif action == "import":
        skill.category = category  # a folder moved to another category in the import
        skill.origin = draft.origin or skill.origin
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
            binaries=drafts.binaries_of(draft, current),
            # Hashed while preparing (no lock); a reviewer's draft is hashed here.
            content_hash=draft.content_hash or drafts.draft_hash(draft, current),
            author_actor=author.actor,
            author_person=author.person,
            source_chat=author.chat,
            source_turn=author.turn,
            reason=reason,
            origin=draft.origin or {},
            sources=list(author.sources if sources is None else sources),
            created_at=now,
        )
        skill.current_version = version
        skill.description = draft.front_matter.get("description", "")[:1024]
        skill.required_tools = required_tools(draft.front_matter)
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


def _waiting_proposal(
    slug: str, author: Author, draft: Draft, current: SkillVersion | None
) -> Outcome | None:
    """A proposal that makes this one pointless: the same content already waits (from anyone),
    or, for a background review, any change of the skill waits (approving one supersedes the
    others, so a pile of them only costs reviewers time)."""
    pending = SkillProposal.objects.filter(slug=slug, status=SkillProposal.Status.PENDING)
    same = pending.filter(
        base_number=current.number if current else None,
        content_hash=draft.content_hash,  # hashed by _prepare, not again under the lock
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


def _prepare(
    *,
    slug: str,
    action: str,
    author: Author,
    build: Callable[[Skill | None, SkillVersion | None], Draft],
    base_version: int | None,
    category: str,
    strict_scan: bool,
    apply_now: bool | None,
    asked_scope: str,
) -> tuple[Skill | None, SkillVersion | None, Draft] | Outcome:
    """Phase 1 of a change, with no lock and no transaction open: read the skill as it is
    now, build the draft, validate and scan it. Returns what to store, or the Outcome that
    ends the change (unchanged, blocked; refusals raise _Refused)."""
    skill = Skill.objects.select_related("current_version").filter(slug=slug).first()
    current = skill.current_version if skill is not None else None
    # Where it would land, before anything is built: a skill this chat may not see answers
    # as a name nobody uses, and a refused scope costs no build. Decided again under the lock.
    _placement(author, skill, action, apply_now, asked_scope)
    refusal = state_refusal(slug, action, skill, current, base_version)
    if refusal is not None:
        raise refusal
    try:
        draft = build(skill, current)
    except (SkillFormatError, PatchError) as exc:
        raise _Refused("invalid", f"Error: {exc} Nothing was changed.") from None
    if (
        current is not None
        and not draft.archive
        and draft.skill_md == current.skill_md
        and draft.files == current.files
        and drafts.binaries_of(draft, current) == current.binaries
    ):
        return Outcome(
            "unchanged",
            f"Unchanged: {slug} version {current.number} already has this content.",
            skill=skill,
            version=current,
        )
    draft.content_hash = drafts.draft_hash(draft, current)
    if category and (skill is None or category != skill.category):
        # The category is shown in the index next to the name: a new one is read as words.
        draft.scan.append(("category", readable(category)))
    findings = scan_draft(draft, None if strict_scan else current)
    if findings:
        if not _blocked_before(slug, action, draft.content_hash):
            with transaction.atomic():
                _event(
                    kind=Kind.BLOCKED,
                    slug=slug,
                    author=author,
                    skill=skill,
                    version=current,
                    path=findings[0]["path"],
                    after=draft.after,
                    detail={
                        "action": action,
                        "findings": findings,
                        "content_hash": draft.content_hash,
                    },
                )
        where = "; ".join(f"{f['path']}: {f['summary']}" for f in findings)
        kept = f"{slug} stays at version {current.number}" if current else f"{slug} was not created"
        return Outcome(
            "blocked",
            f"Error: {where}. Nothing was stored: {kept}. Remove that content "
            "and retry; a skill that needs a secret names where it comes from.",
            skill=skill,
            version=current,
            findings=findings,
        )
    return skill, current, draft


def _store(
    *,
    slug: str,
    action: str,
    author: Author,
    category: str,
    apply_now: bool | None,
    asked_scope: str,
    seen: Skill | None,
    current: SkillVersion | None,
    draft: Draft,
) -> Outcome:
    """Phase 2 of a change: under the skill's row lock, store `draft` as the next version
    (or a proposal) if the skill is still as `_prepare` saw it (`seen`, `current`); raises
    _Moved otherwise. Nothing here is proportional to the content but the insert itself."""
    with transaction.atomic():
        skill = _lock(slug)
        if (skill is None) != (seen is None) or (
            skill is not None
            and (
                skill.current_version_id != (current.pk if current else None)
                or skill.status != seen.status
            )
        ):
            raise _Moved
        if skill is not None:
            skill.current_version = current  # the same row, already read: not fetched again
        # Again under the lock: a promotion meanwhile changes where the change lands.
        placement = _placement(author, skill, action, apply_now, asked_scope)
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
                describe_applied(skill, version, action, draft) + scope.describe(placement),
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
            content_hash=draft.content_hash,
            author_actor=author.actor,
            author_person=author.person,
            source_chat=author.chat,
            source_turn=author.turn,
            reason=author.reason,
            sources=list(author.sources),
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
        # Reviewers' pages and notices read the diff from the cache: compute it once, now,
        # after commit (no lock), rather than in the first page view.
        transaction.on_commit(lambda: content_diff_cached(before=current, after=proposal))
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
    """Validate, scan and apply (or propose) one change: prepared without any lock, stored
    under the skill's row lock only if the skill did not move meanwhile (see the module
    docstring); where it lands (applied or proposed, team or personal) is
    `skills.scope.place`'s decision, taken before the build and again under the lock. With
    `strict_scan`, a finding the current version already had blocks too."""
    try:
        slug = check_name(slug)
        category = check_category(category)
    except SkillFormatError as exc:
        return Outcome("invalid", f"Error: {exc}")
    for _attempt in range(PREPARE_ATTEMPTS):
        try:
            prepared = _prepare(
                slug=slug,
                action=action,
                author=author,
                build=build,
                base_version=base_version,
                category=category,
                strict_scan=strict_scan,
                apply_now=apply_now,
                asked_scope=asked_scope,
            )
            if isinstance(prepared, Outcome):
                return prepared
            seen, current, draft = prepared
            return _store(
                slug=slug,
                action=action,
                author=author,
                category=category,
                apply_now=apply_now,
                asked_scope=asked_scope,
                seen=seen,
                current=current,
                draft=draft,
            )
        except _Moved:
            continue  # another change landed while this one was built: build it again
        except _Refused as refused:
            return Outcome(refused.code, str(refused))
        except IntegrityError:
            break
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
        build=lambda skill, current: drafts.whole(name, content, {}),
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
        build=lambda skill, current: drafts.whole(
            name, content, current.files, before=current.skill_md
        ),
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
            patched = apply_patch(
                current.skill_md,
                old_string,
                new_string,
                replace_all=replace_all,
                max_chars=MAX_SKILL_MD_CHARS,
            )
            detail = {"match": patched.level, "replaced": patched.count}
            try:
                draft = drafts.whole(name, patched.text, current.files, detail=detail)
            except SkillFormatError as exc:
                raise SkillFormatError(f"the patched SKILL.md would be invalid: {exc}") from None
            draft.before, draft.after = old_string, new_string
            return draft
        path = normalise_path(file_path)
        if path not in current.files:
            raise _missing_file(name, path, current)
        # A file's limit is in bytes; a text of more characters has more bytes.
        patched = apply_patch(
            current.files[path],
            old_string,
            new_string,
            replace_all=replace_all,
            max_chars=FILE_MAX_BYTES,
        )
        files = {**current.files, path: check_file_content(path, patched.text)}
        draft = drafts.with_files(current, files, path=path, before=old_string, after=patched.text)
        draft.after, draft.detail = new_string, {"match": patched.level, "replaced": patched.count}
        draft.scan = [(path, patched.text)]
        return draft

    return _change(slug=name, action="patch", author=author, base_version=base_version, build=build)


def _missing_file(name: str, path: str, current: SkillVersion) -> _Refused:
    listed = ", ".join(sorted([*current.files, *current.binaries])) or "none"
    return _Refused("not_found", f"Error: {name} has no file {path!r}. Its files: {listed}.")


def skill_file_write(
    *, name: str, file_path: str, file_content: str, author: Author, base_version=None
) -> Outcome:
    """Create or replace one supporting file of `name` (text, under the allowed folders)."""

    def build(skill: Skill, current: SkillVersion) -> Draft:
        path = normalise_path(file_path)
        content = check_file_content(path, file_content)
        files = {**current.files, path: content}
        binaries = {key: sha for key, sha in current.binaries.items() if key != path}
        return drafts.with_files(
            current,
            files,
            path=path,
            before=current.files.get(path, ""),
            after=content,
            binaries=binaries,
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
        if path in current.binaries:
            binaries = {key: sha for key, sha in current.binaries.items() if key != path}
            return drafts.with_files(
                current, current.files, path=path, before="", after="", binaries=binaries
            )
        if path not in current.files:
            raise _missing_file(name, path, current)
        files = {key: value for key, value in current.files.items() if key != path}
        return drafts.with_files(current, files, path=path, before=current.files[path], after="")

    return _change(
        slug=name, action="remove_file", author=author, base_version=base_version, build=build
    )


def skill_delete(*, name: str, author: Author, base_version: int | None = None) -> Outcome:
    """Archive `name` (recoverable: a skill reviewer restores it; versions are kept)."""
    return _change(
        slug=name, action="delete", author=author, base_version=base_version, build=drafts.archived
    )


def skill_import(
    *,
    name: str,
    content: str,
    files: dict,
    category: str,
    author: Author,
    binaries: dict[str, bytes] | None = None,
    origin: dict | None = None,
    replace: bool = False,
    dry_run: bool = False,
) -> Outcome:
    """Create or update `name` from a folder's content (text `files`, binary `binaries`);
    unchanged content (same hash) stores nothing. Validated and scanned like any write;
    applies at once (an operator's act). A skill of that name from another `origin` is
    refused (`conflict`) unless `replace`; `dry_run` answers the same and stores nothing."""
    try:
        checked_binaries = {}
        for path, data in (binaries or {}).items():
            normal = normalise_path(path)
            if normal in checked_binaries:
                raise SkillFormatError(f"two files normalise to the same path {normal!r}.")
            checked_binaries[normal] = check_binary(normal, data)
        checked = check_files(files, {path: len(data) for path, data in checked_binaries.items()})
    except SkillFormatError as exc:
        return Outcome("invalid", f"Error: {exc}")
    if dry_run:
        shas = {path: blob_sha256(data) for path, data in checked_binaries.items()}
    else:
        shas = skill_blobs_store(checked_binaries)

    def build(skill: Skill | None, current: SkillVersion | None) -> Draft:
        draft = drafts.folder(name, content, checked, current)
        draft.binaries, draft.origin = dict(sorted(shas.items())), origin
        # The stored hash, not the current content hashed again: it is the same function.
        unchanged = (
            current is not None and drafts.draft_hash(draft, current) == current.content_hash
        )
        if (
            skill is not None
            and not unchanged
            and not replace
            and not drafts.same_origin(skill, current, origin)
        ):
            where = ", ".join(
                str(skill.origin[key]) for key in ("path", "root", "via") if skill.origin.get(key)
            )
            raise _Refused(
                "conflict",
                f"Error: a skill named {name!r} already exists from another origin "
                f"({where or 'not recorded'}). Nothing was changed: import with --replace to "
                "make this folder its source, or rename the folder.",
            )
        return draft

    def change() -> Outcome:
        return _change(
            slug=name,
            action="import",
            author=author,
            category=category,
            build=build,
            apply_now=True,
        )

    if not dry_run:
        return change()
    with transaction.atomic():
        outcome = change()
        transaction.set_rollback(True)  # a dry run stores nothing, not even a blocked event
    return outcome


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
            return drafts.archived(skill, current)
        return drafts.folder(
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
