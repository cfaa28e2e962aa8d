"""Skill proposals nobody will decide: expired on a schedule (`skills.tasks.expire_proposals`,
run hourly by beat), with a word to the chat each was asked in.

A pending proposal expires when it is older than SKILLS_PROPOSAL_TTL_DAYS, or at once when
its skill was archived meanwhile (a reviewer's archive or the curator's: a change of an
archived skill can never be approved, so it would wait forever). Each expiry runs under the
proposal's row lock, is decided again there (a decision that got there first wins), and
writes its SkillEvent (kind=expired, via=system) in the same transaction; a second or
concurrent run finds nothing more to do. Afterwards each source chat gets one notice listing
its expired changes (action and skill name: skills are team-wide, the chat asked for them);
proposals from no chat (the curator's merges) are only audited.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from chats.models import Chat
from chats.notices import chat_notice_post
from skills.models import Skill, SkillProposal, Via
from skills.services import Author, Kind, _event

Status = SkillProposal.Status
BATCH = 500  # proposals one run expires at most; the rest wait for the next run
NOTICE_ITEMS = 10  # changes a notice names; more are counted
NOTICE_KIND = "skills-expiry"


@dataclass(frozen=True)
class Expired:
    """One proposal this run expired."""

    proposal_id: int
    slug: str
    action: str
    chat_id: int | None
    reason: str  # "ttl" or "archived"


def _due(now) -> Q:
    cutoff = now - timedelta(days=settings.SKILLS_PROPOSAL_TTL_DAYS)
    return Q(created_at__lte=cutoff) | Q(skill__status=Skill.Status.ARCHIVED)


def skill_proposals_expire(*, now=None) -> list[Expired]:
    """Expire every pending proposal past SKILLS_PROPOSAL_TTL_DAYS or on an archived skill (at
    most BATCH a run, oldest first), each audited in its own transaction, then tell each
    source chat in one notice. Decided proposals are never touched. Returns what expired."""
    now = now or timezone.now()
    ids = list(
        SkillProposal.objects.filter(_due(now), status=Status.PENDING)
        .order_by("created_at", "id")
        .values_list("pk", flat=True)[:BATCH]
    )
    expired = [item for item in (_expire_one(pk, now) for pk in ids) if item is not None]
    _tell_chats(expired)
    return expired


def _expire_one(proposal_id: int, now) -> Expired | None:
    with transaction.atomic():
        proposal = (
            SkillProposal.objects.select_for_update(of=("self",))
            .select_related("skill")
            .filter(_due(now), pk=proposal_id, status=Status.PENDING)
            .first()
        )
        if proposal is None:  # decided (or expired) since it was listed
            return None
        archived = proposal.skill is not None and proposal.skill.status == Skill.Status.ARCHIVED
        reason = "archived" if archived else "ttl"
        proposal.status = Status.EXPIRED
        proposal.decided_at = now
        proposal.save(update_fields=["status", "decided_at"])
        _event(
            kind=Kind.EXPIRED,
            slug=proposal.slug,
            author=Author(via=Via.SYSTEM),
            skill=proposal.skill,
            proposal=proposal,
            detail={"reason": reason, "ttl_days": settings.SKILLS_PROPOSAL_TTL_DAYS},
        )
        return Expired(proposal.pk, proposal.slug, proposal.action, proposal.source_chat_id, reason)


def notice_text(items: list[Expired]) -> str:
    """The notice for one chat: each expired change as "<action> of <skill> (<why>)"."""
    ttl = f"{settings.SKILLS_PROPOSAL_TTL_DAYS:g}"
    parts = []
    for item in items[:NOTICE_ITEMS]:
        why = (
            "the skill was archived" if item.reason == "archived" else f"no decision in {ttl} days"
        )
        parts.append(f"{item.action.replace('_', ' ')} of {item.slug} ({why})")
    if len(items) > NOTICE_ITEMS:
        parts.append(f"and {len(items) - NOTICE_ITEMS} more")
    head = "A skill change" if len(items) == 1 else f"{len(items)} skill changes"
    return f"{head} proposed here expired, nothing was changed: {'; '.join(parts)}."


def _tell_chats(expired: list[Expired]) -> None:
    by_chat: dict[int, list[Expired]] = {}
    for item in expired:
        if item.chat_id is not None:
            by_chat.setdefault(item.chat_id, []).append(item)
    for chat in Chat.objects.filter(pk__in=by_chat):
        items = by_chat[chat.pk]
        chat_notice_post(
            chat=chat,
            text=notice_text(items),
            kind=NOTICE_KIND,
            detail={"proposals": [item.proposal_id for item in items]},
        )
