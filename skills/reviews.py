"""What skill reviewers do: decide proposals, roll back, archive, restore, pin and promote a
personal skill to the team.

Only a skill reviewer (policy.may_review) acts; everyone else is refused with
SkillNotAllowed and changes nothing. A decision names the version the reviewer was shown,
so a proposal whose skill moved on since is never applied unseen (SkillStale). Like every
write to skills, under the skill's row lock with the audit event in the same transaction;
the content is scanned before that transaction opens (`_prescan`), so no lock is held while
the scanner reads a large skill, and the scan is used only if the skill is still as read.
"""

from django.db import transaction
from django.utils import timezone

from chats.work_sources import bounding, file_names
from skills import policy
from skills.format import SKILL_FILE
from skills.models import Scope, Skill, SkillProposal, SkillVersion, Via
from skills.scan import Draft, scan_draft
from skills.services import (
    Author,
    Kind,
    SkillConflict,
    SkillInvalid,
    SkillNotAllowed,
    SkillStale,
    _apply,
    _event,
    _lock,
)

Status = SkillProposal.Status


def _prescan(read, scan) -> tuple:
    """(the key of what was read, the scan's result), computed with no lock held; `read`
    returns (key, what to scan) from unlocked rows, or None when there is nothing to scan.
    Under the lock the caller uses the result only if its own key is the same."""
    got = read()
    if got is None:
        return (object(), None)  # a key nothing equals: scan under the lock if it comes to it
    key, item = got
    return (key, scan(item))


def _approval_draft(proposal: SkillProposal, current: SkillVersion | None) -> Draft:
    return Draft(
        skill_md=proposal.skill_md,
        files=proposal.files,
        front_matter=proposal.front_matter,
        archive=proposal.action == "delete",
        after=proposal.skill_md,
        scan=[(SKILL_FILE, proposal.skill_md)]
        + [
            (path, text)
            for path, text in proposal.files.items()
            if current is None or current.files.get(path) != text
        ],
    )


def _read_approval(proposal_id: int):
    proposal = SkillProposal.objects.filter(pk=proposal_id, status=Status.PENDING).first()
    if proposal is None or proposal.action == "delete":
        return None
    skill = Skill.objects.select_related("current_version").filter(slug=proposal.slug).first()
    current = skill.current_version if skill is not None else None
    draft = _approval_draft(proposal, current)
    return (current.pk if current else None, (draft, current))


def _scan_approval(item) -> tuple[Draft, list]:
    draft, current = item
    return draft, scan_draft(draft, current)


def _version_draft(version: SkillVersion) -> Draft:
    """A version's whole content, to be scanned strictly (rollback, promotion)."""
    return Draft(
        skill_md=version.skill_md,
        files=version.files,
        binaries=dict(version.binaries),
        front_matter=version.front_matter,
        content_hash=version.content_hash,  # the same content: a rollback hashes nothing
        scan=[(SKILL_FILE, version.skill_md), *version.files.items()],
    )


def _read_version(slug: str, number: int | None = None):
    """The version `number` of `slug` (its current one for None), unlocked, keyed by id."""
    skill = Skill.objects.select_related("current_version").filter(slug=slug).first()
    if skill is None or skill.current_version is None:
        return None
    version = skill.current_version
    if number is not None:
        version = skill.versions.filter(number=number).first()
    return None if version is None else (version.pk, version)


def _reviewer(person) -> None:
    if not policy.may_review(person):
        raise SkillNotAllowed("only skill reviewers (staff or the reviewers group) may do this")


def skill_proposal_decide(
    *,
    proposal_id: int,
    decision: str,
    shown_version: int | None,
    person,
    via: str = Via.DASHBOARD,
    note: str = "",
) -> SkillProposal:
    """Approve or reject a pending proposal as the skill reviewer `person`, exactly as shown:
    `shown_version` is the skill version the reviewer compared it with (None for a new
    skill). Raises SkillNotAllowed, SkillConflict (already decided), SkillStale (the skill
    changed since; the proposal is then superseded) or SkillInvalid (blocked by the scanner)."""
    if decision not in ("approve", "reject"):
        raise ValueError("decision must be approve or reject")
    _reviewer(person)
    reviewer = Author(person=person, via=via, reason=note)
    stale = blocked = False
    scanned = (object(), None)
    if decision == "approve":
        scanned = _prescan(lambda: _read_approval(proposal_id), _scan_approval)
    with transaction.atomic():
        proposal = SkillProposal.objects.select_for_update().filter(pk=proposal_id).first()
        if proposal is None:
            raise SkillConflict("this proposal does not exist")
        skill = _lock(proposal.slug)
        proposal.refresh_from_db()
        if proposal.status != Status.PENDING:
            raise SkillConflict(f"this proposal was already decided ({proposal.status})")
        current = skill.current_version if skill is not None else None
        now_number = current.number if current else None
        author = Author(
            actor=proposal.author_actor,
            person=proposal.author_person,
            chat=proposal.source_chat,
            turn=proposal.source_turn,
            via=Via.SYSTEM if proposal.via == Via.SYSTEM else Via.AGENT,
            reason=proposal.reason,
        )
        common = {"slug": proposal.slug, "author": reviewer, "proposal": proposal}
        noted = {"note": note} if note else {}
        if shown_version != proposal.base_number or now_number != proposal.base_number:
            if now_number != proposal.base_number:
                proposal.status = Status.SUPERSEDED
                proposal.save(update_fields=["status"])
                stale = True
            else:
                raise SkillStale("you were shown another version than this proposal is based on")
        elif decision == "reject":
            proposal.status = Status.REJECTED
            _event(kind=Kind.REJECTED, skill=skill, version=current, detail=noted, **common)
        else:
            if scanned[0] == (current.pk if current else None):
                draft, findings = scanned[1]  # scanned against this very version, unlocked
            else:
                draft = _approval_draft(proposal, current)
                findings = [] if draft.archive else scan_draft(draft, current)
            if findings:
                _event(kind=Kind.BLOCKED, skill=skill, detail={"findings": findings}, **common)
                proposal.status = Status.REJECTED
                proposal.decided_by, proposal.decided_at = person, timezone.now()
                proposal.save()
                blocked = True
            else:
                skill, version = _apply(
                    skill=skill,
                    slug=proposal.slug,
                    category=proposal.category,
                    action=proposal.action,
                    draft=draft,
                    author=author,
                    reason=proposal.reason,
                    sources=proposal.sources,  # the version draws on what the proposal did
                )
                proposal.status = Status.APPROVED
                proposal.result_version = version
                if proposal.skill_id is None:
                    proposal.skill = skill
                _event(
                    kind=Kind.APPROVED,
                    skill=skill,
                    version=version or current,
                    detail=noted,
                    **common,
                )
        if not stale and not (decision == "approve" and blocked):
            proposal.decided_by, proposal.decided_at = person, timezone.now()
            proposal.save()
    if stale:
        raise SkillStale("the skill changed since this proposal was made; it is superseded")
    if decision == "approve" and blocked:
        raise SkillInvalid("the proposal was blocked by the content scan and is rejected")
    return proposal


def _locked_skill(slug: str) -> Skill:
    skill = _lock(slug)
    if skill is None or skill.current_version is None:
        raise SkillConflict(f"there is no skill named {slug!r}")
    return skill


def skill_rollback(
    *, name: str, to_number: int, shown_version: int, person, via: str = Via.DASHBOARD
) -> SkillVersion:
    """Make the content of version `to_number` current again, as a new version (history is
    never rewritten). Scanned again; refused if the skill moved past `shown_version`."""
    _reviewer(person)
    scanned = _prescan(
        lambda: _read_version(name, to_number), lambda v: scan_draft(_version_draft(v))
    )
    with transaction.atomic():
        skill = _locked_skill(name)
        current = skill.current_version
        if current.number != shown_version:
            raise SkillStale(f"{name} is at version {current.number} now, not {shown_version}")
        target = skill.versions.filter(number=to_number).first()
        if target is None:
            raise SkillConflict(f"{name} has no version {to_number}")
        if target.content_hash == current.content_hash:
            raise SkillConflict(
                f"version {to_number} of {name} has the same content as the current version"
                f" {current.number}: nothing to roll back"
            )
        author = Author(person=person, via=via)
        draft = _version_draft(target)
        draft.before, draft.after = current.skill_md, target.skill_md
        draft.detail = {"restored_version": to_number}
        # Versions never change: a scan of the target read before the lock still holds.
        findings = scanned[1] if scanned[0] == target.pk else scan_draft(draft)
        if findings:
            _event(
                kind=Kind.BLOCKED,
                slug=name,
                author=author,
                skill=skill,
                detail={"findings": findings},
            )
        else:
            _, version = _apply(
                skill=skill,
                slug=name,
                category=skill.category,
                action="rollback",
                draft=draft,
                author=author,
                reason=f"rollback to version {to_number}",
                sources=target.sources,  # the restored content drew on what it drew on
            )
            return version
    raise SkillInvalid(f"version {to_number} is blocked by today's content scan: {findings}")


def skill_set_status(*, name: str, archived: bool, person, via: str = Via.DASHBOARD) -> Skill:
    """Archive (out of the index, recoverable) or restore a skill, as a skill reviewer."""
    _reviewer(person)
    with transaction.atomic():
        skill = _locked_skill(name)
        wanted = Skill.Status.ARCHIVED if archived else Skill.Status.ACTIVE
        if skill.status == wanted:
            return skill
        # Making a stale skill active again is a reactivation, not a restore from the archive.
        kind = (
            Kind.ARCHIVE
            if archived
            else Kind.REACTIVATE
            if skill.status == Skill.Status.STALE
            else Kind.RESTORE
        )
        skill.status, skill.updated_at = wanted, timezone.now()
        skill.save(update_fields=["status", "updated_at"])
        _event(
            kind=kind,
            slug=name,
            author=Author(person=person, via=via),
            skill=skill,
            version=skill.current_version,
        )
        return skill


def skill_pin(*, name: str, pinned: bool, person, via: str = Via.DASHBOARD) -> Skill:
    """Pin a skill (listed first in the index, never marked stale) or unpin it."""
    _reviewer(person)
    with transaction.atomic():
        skill = _locked_skill(name)
        if skill.pinned == pinned:
            return skill
        skill.pinned = pinned
        skill.save(update_fields=["pinned"])
        _event(
            kind=Kind.PIN if pinned else Kind.UNPIN,
            slug=name,
            author=Author(person=person, via=via),
            skill=skill,
            version=skill.current_version,
        )
        return skill


def skill_promote(*, name: str, shown_version: int, person, via: str = Via.DASHBOARD) -> Skill:
    """Make the personal skill `name` a team skill (indexed in every chat), as a skill
    reviewer, exactly as shown: refused (SkillStale) if it moved past `shown_version`, and
    (SkillInvalid) if today's scanner blocks its content, which is about to reach everyone.
    Audited as `promote` with the former owner, under the skill's row lock."""
    _reviewer(person)
    scanned = _prescan(lambda: _read_version(name), lambda v: scan_draft(_version_draft(v)))
    with transaction.atomic():
        skill = _locked_skill(name)
        current = skill.current_version
        if skill.scope != Scope.PERSONAL:
            raise SkillConflict(f"{name} is already a team skill")
        drawn = bounding(
            s for sources in skill.versions.values_list("sources", flat=True) for s in sources
        )
        if drawn:
            # A version drew on a file of its owner's private chat: the team would read it.
            raise SkillInvalid(
                f"{name} draws on a file of its owner's private chat or a restricted collection "
                f"({file_names(drawn)}), "
                "which only their readers may read: it stays a personal skill"
            )
        if current.number != shown_version:
            raise SkillStale(f"{name} is at version {current.number} now, not {shown_version}")
        author = Author(person=person, via=via)
        scanned_here = scanned[0] == current.pk
        findings = scanned[1] if scanned_here else scan_draft(_version_draft(current))
        if findings:
            _event(
                kind=Kind.BLOCKED,
                slug=name,
                author=author,
                skill=skill,
                version=current,
                detail={"action": "promote", "findings": findings},
            )
        else:
            owner = skill.owner_person or skill.owner_actor
            former = {
                "former_owner": (
                    skill.owner_person.get_username()
                    if skill.owner_person is not None
                    else str(skill.owner_actor or "")
                )
            }
            skill.scope, skill.owner_person, skill.owner_actor = Scope.TEAM, None, None
            skill.updated_at = timezone.now()
            skill.save(update_fields=["scope", "owner_person", "owner_actor", "updated_at"])
            _event(
                kind=Kind.PROMOTE,
                slug=name,
                author=author,
                skill=skill,
                version=current,
                detail=former if owner is not None else {},
            )
            return skill
    raise SkillInvalid(f"{name} is blocked by today's content scan: {findings}")
