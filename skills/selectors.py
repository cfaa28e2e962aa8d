"""Reads of skills: the prompt index, listings, one skill's content, usage and proposals.

Skills are team-wide: every chat's agent sees the same active skills. Proposals are never
shown to the model; they are for skill reviewers only (`skill_proposals_reviewable`).
"""

from dataclasses import dataclass

from django.db.models import BigIntegerField, Count, Exists, Max, OuterRef, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from chats.models import Message
from skills import policy
from skills.models import Skill, SkillEvent, SkillProposal, SkillUsage, SkillVersion

INDEX_STATUSES = (Skill.Status.ACTIVE, Skill.Status.STALE)


@dataclass(frozen=True)
class IndexRow:
    slug: str
    category: str
    description: str
    pinned: bool


def skills_index_rows() -> list[IndexRow]:
    """Active (and stale) skills for the prompt index: pinned first, then by category and
    name. Only the three short columns are read, never a body."""
    rows = (
        Skill.objects.filter(status__in=INDEX_STATUSES, current_version__isnull=False)
        .order_by("-pinned", "category", "slug")
        .values_list("slug", "category", "description", "pinned")
    )
    return [IndexRow(*row) for row in rows]


def skills_listing(*, category: str = "", query: str = "", include_archived: bool = False):
    """Skills with their category, status and description, filtered by category and a
    case-insensitive search in name and description."""
    skills = Skill.objects.filter(current_version__isnull=False)
    if not include_archived:
        skills = skills.exclude(status=Skill.Status.ARCHIVED)
    if category:
        skills = skills.filter(category=category)
    if query:
        skills = skills.filter(Q(slug__icontains=query) | Q(description__icontains=query))
    return skills.select_related("current_version").order_by("-pinned", "category", "slug")


def skill_get(name: str, *, include_archived: bool = False) -> Skill | None:
    """The skill called `name` with its current version, or None."""
    skills = Skill.objects.select_related("current_version").filter(
        slug=name, current_version__isnull=False
    )
    if not include_archived:
        skills = skills.exclude(status=Skill.Status.ARCHIVED)
    return skills.first()


def skill_categories() -> list[tuple[str, int]]:
    """(category, number of listed skills), by category."""
    rows = (
        Skill.objects.exclude(status=Skill.Status.ARCHIVED)
        .filter(current_version__isnull=False)
        .values("category")
        .annotate(n=Count("id"))
        .order_by("category")
    )
    return [(row["category"], row["n"]) for row in rows]


def skill_versions(skill: Skill) -> QuerySet[SkillVersion]:
    """Every version of `skill`, newest first."""
    return skill.versions.select_related("author_person", "author_actor").order_by("-number")


def skill_events(skill: Skill) -> QuerySet[SkillEvent]:
    """The audit trail of `skill`, oldest first."""
    return skill.events.select_related("person", "actor", "version").order_by("created_at", "id")


def skill_usage(skill: Skill, *, limit: int = 50) -> list[dict]:
    """Recent loads of `skill`: when, where, which version, and the outcome of the turn that
    loaded it (its status, and whether one of its tool calls failed)."""
    tool_failed = Message.objects.annotate(
        result_turn_id=Cast(KT("metadata__turn"), BigIntegerField())  # jsonb = bigint fails on PG
    ).filter(
        chat_id=OuterRef("turn__chat_id"),
        role=Message.Role.TOOL,
        result_turn_id=OuterRef("turn_id"),
        metadata__is_error=True,
    )
    rows = (
        SkillUsage.objects.filter(skill=skill)
        .select_related("turn", "chat", "version")
        .annotate(tool_failed=Exists(tool_failed))
        .order_by("-created_at", "-id")[:limit]
    )
    return [
        {
            "at": row.created_at,
            "chat": row.chat,
            "turn": row.turn,
            "path": row.path,
            "version": row.version.number if row.version else None,
            "outcome": (row.turn.status if row.turn else "") or "",
            "tool_errors": row.tool_failed,
        }
        for row in rows
    ]


def skill_usage_counts(skills: list[Skill]) -> dict[int, dict]:
    """Per skill id: how many loads and when the last one was."""
    rows = (
        SkillUsage.objects.filter(skill__in=skills)
        .values("skill_id")
        .annotate(n=Count("id"), last=Max("created_at"))
    )
    return {row["skill_id"]: {"count": row["n"], "last": row["last"]} for row in rows}


def skill_proposals_reviewable(person) -> QuerySet[SkillProposal]:
    """Pending proposals, oldest first, for a skill reviewer; none for anyone else."""
    if not policy.may_review(person):
        return SkillProposal.objects.none()
    return SkillProposal.objects.filter(status=SkillProposal.Status.PENDING).select_related(
        "skill", "author_person", "author_actor", "source_chat"
    )
