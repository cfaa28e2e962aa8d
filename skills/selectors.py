"""Reads of skills: the prompt index, listings, one skill's content, usage and proposals.

Every read of skills takes an `audience` (a filter from `skills.scope`): `scope.in_chat(...)`
for what the agent may index, list and load in a chat (team skills, and the author's personal
skills in their own private chat), `scope.for_person(person)` for the dashboard (team skills
and the person's own; everything for skill reviewers). Without one, team skills only.
Proposals are never shown to the model; they are for skill reviewers only
(`skill_proposals_reviewable`). The dashboard's rows (`skill_version_rows`, `skill_event_rows`,
`skill_usage_rows`) name a chat only to a person who may read it.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import (
    BigIntegerField,
    Count,
    Exists,
    F,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from chats.models import Actor, Chat, Message
from chats.rows import fetch_prepared
from chats.selectors import chats_readable_by
from skills import policy
from skills.models import Scope, Skill, SkillEvent, SkillProposal, SkillUsage, SkillVersion

INDEX_STATUSES = (Skill.Status.ACTIVE, Skill.Status.STALE)
# A version's content: a listing that needs its number, author or hash leaves these unread.
VERSION_CONTENT = ("skill_md", "front_matter", "files")
LINKED_VERSION_CONTENT = tuple(f"version__{name}" for name in VERSION_CONTENT)


@dataclass(frozen=True)
class IndexRow:
    slug: str
    category: str
    description: str
    pinned: bool
    stale: bool = False  # listed, but unused long enough for the curator to mark it
    personal: bool = False
    # The tools it names ({"tools": [...], "toolsets": [...]}, see Skill.required_tools), and
    # whether some of them are not available in the chat the index is for.
    required_tools: dict | None = field(default=None, compare=False)
    tools_missing: bool = False


TEAM_ONLY = Q(scope=Scope.TEAM)


def skills_index_rows(*, audience: Q | None = None) -> list[IndexRow]:
    """Active (and stale) skills of `audience` (team only without one) for the prompt index:
    pinned first, then by category and name. Only the short columns are read, never a body."""
    rows = (
        Skill.objects.filter(
            audience if audience is not None else TEAM_ONLY,
            status__in=INDEX_STATUSES,
            current_version__isnull=False,
        )
        .order_by("-pinned", "category", "slug")
        # As text: most skills name no tools ("{}"), and decoding every row's JSON on every
        # turn would cost more than the rest of the row.
        .annotate(needs=Cast("required_tools", output_field=TextField()))
        .values_list("slug", "category", "description", "pinned", "status", "scope", "needs")
    )
    return [
        IndexRow(
            slug,
            category,
            description,
            pinned,
            stale=status == Skill.Status.STALE,
            personal=scope == Scope.PERSONAL,
            required_tools=json.loads(needs) if needs and needs != "{}" else None,
        )
        for slug, category, description, pinned, status, scope, needs in rows
    ]


def skills_maybe_indexed(context) -> bool:
    """False only when `skills_index_rows(audience=scope.for_turn(context))` is empty: no
    team skill in the index and no personal skill of the turn's author (by person, by actor,
    or by an actor linked to the person). Asked first on every turn, so it is one statement
    written once (no queryset compiled, no audience resolved) and always current: nothing is
    cached, so a new, restored or archived skill counts from the next turn on."""
    person_id = actor_id = None
    if context is not None:
        actor = context.actor
        actor_id = getattr(actor, "pk", None)
        person_id = getattr(context.person, "pk", None)
        if person_id is None and actor is not None:
            person_id = actor.person_id
    params = [*INDEX_STATUSES, Scope.TEAM, Scope.PERSONAL, person_id, actor_id, person_id]
    return bool(fetch_prepared("skills_maybe_indexed", _maybe_indexed_sql, params))


def _maybe_indexed_sql(quote) -> str:
    skill, actor = Skill._meta, Actor._meta

    def column(meta, name: str) -> str:
        return f"{quote(meta.db_table)}.{quote(meta.get_field(name).column)}"

    return (
        f"SELECT 1 FROM {quote(skill.db_table)} WHERE {column(skill, 'status')} IN (%s, %s) "
        f"AND {column(skill, 'current_version')} IS NOT NULL AND ({column(skill, 'scope')} = %s "
        f"OR ({column(skill, 'scope')} = %s AND ({column(skill, 'owner_person')} = %s "
        f"OR {column(skill, 'owner_actor')} = %s OR {column(skill, 'owner_actor')} IN "
        f"(SELECT {column(actor, 'id')} FROM {quote(actor.db_table)} "
        f"WHERE {column(actor, 'person')} = %s)))) LIMIT 1"
    )


def _skills_matching(*, category: str, query: str, audience: Q | None = None) -> QuerySet[Skill]:
    """Skills of `audience` (team only without one) with content in `category` or below it
    (`mlops` also lists `mlops/inference`; any for "") whose name or description contains
    `query` (case-insensitive), pinned first, then by category and name."""
    skills = Skill.objects.filter(
        audience if audience is not None else TEAM_ONLY, current_version__isnull=False
    )
    if category:
        category = category.strip("/")
        skills = skills.filter(Q(category=category) | Q(category__startswith=f"{category}/"))
    if query:
        skills = skills.filter(Q(slug__icontains=query) | Q(description__icontains=query))
    return skills.order_by("-pinned", "category", "slug")


def skills_listing(
    *,
    category: str = "",
    query: str = "",
    include_archived: bool = False,
    audience: Q | None = None,
):
    """Skills of `audience` (team only without one) with their category, status and
    description, filtered by category and a case-insensitive search in name and description."""
    skills = _skills_matching(category=category, query=query, audience=audience)
    if not include_archived:
        skills = skills.exclude(status=Skill.Status.ARCHIVED)
    return skills.select_related("current_version")


def skill_get(
    name: str, *, include_archived: bool = False, audience: Q | None = None
) -> Skill | None:
    """The skill called `name` with its current version, or None (also when it is not in
    `audience`, team only without one)."""
    skills = Skill.objects.select_related("current_version", "owner_person", "owner_actor").filter(
        audience if audience is not None else TEAM_ONLY, slug=name, current_version__isnull=False
    )
    if not include_archived:
        skills = skills.exclude(status=Skill.Status.ARCHIVED)
    return skills.first()


def skill_categories() -> list[tuple[str, int]]:
    """(category, number of listed team skills), by category."""
    rows = (
        Skill.objects.filter(TEAM_ONLY)
        .exclude(status=Skill.Status.ARCHIVED)
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
        .defer(*LINKED_VERSION_CONTENT, "turn__prompt_report")  # a status is enough
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


# --- what the prompt index reads of a conversation ----------------------------------------

INDEX_RECENT_LOADS = 50  # a chat's newest loads that count as "used lately"


def index_recent_user_texts(chat: Chat, *, before_id: int, limit: int) -> list[str]:
    """The texts of the chat's newest `limit` user messages before `before_id`, newest first."""
    rows = (
        Message.objects.filter(chat=chat, role=Message.Role.USER, id__lt=before_id)
        .order_by("-id")
        .values_list("text", flat=True)[:limit]
    )
    return list(rows)


def index_recent_loads(chat: Chat) -> dict[str, int]:
    """Per skill name: how many of the chat's newest INDEX_RECENT_LOADS loads were of it."""
    slugs = (
        SkillUsage.objects.filter(chat=chat)
        .order_by("-created_at", "-id")
        .values_list("skill__slug", flat=True)[:INDEX_RECENT_LOADS]
    )
    loads: dict[str, int] = {}
    for slug in slugs:
        loads[slug] = loads.get(slug, 0) + 1
    return loads


def skill_proposals_reviewable(person) -> QuerySet[SkillProposal]:
    """Pending proposals, oldest first, for a skill reviewer; none for anyone else."""
    if not policy.may_review(person):
        return SkillProposal.objects.none()
    return SkillProposal.objects.filter(status=SkillProposal.Status.PENDING).select_related(
        "skill", "author_person", "author_actor__person", "source_chat"
    )


# --- the dashboard pages -------------------------------------------------------------------

# The library's status filter: "" (the default) lists what the agent's index lists.
LIBRARY_STATUSES = {
    "": INDEX_STATUSES,
    "active": (Skill.Status.ACTIVE,),
    "stale": (Skill.Status.STALE,),
    "archived": (Skill.Status.ARCHIVED,),
    "all": None,
}
# Events that record no change of their own (a proposal, a refusal, or the approval that
# accompanies the change event it caused); every other kind counts as "last change".
NOT_CHANGES = (
    SkillEvent.Kind.PROPOSED,
    SkillEvent.Kind.BLOCKED,
    SkillEvent.Kind.REJECTED,
    SkillEvent.Kind.APPROVED,
)
# Events whose text never became a version (see skill_event_rows).
UNREVIEWED_TEXT = (SkillEvent.Kind.PROPOSED, SkillEvent.Kind.BLOCKED, SkillEvent.Kind.REJECTED)


def skills_library(
    *, query: str = "", category: str = "", status: str = "", audience: Q | None = None
) -> QuerySet[Skill]:
    """Skills of `audience` (team only without one) for the library page (`status` a key of
    LIBRARY_STATUSES), pinned first, each with its current version number, usage count, last
    use and last change annotated by subqueries: one query for a page, however many skills
    there are. Bodies are not read."""
    skills = _skills_matching(category=category, query=query, audience=audience).only(
        "slug", "category", "status", "pinned", "description", "updated_at", "scope"
    )
    statuses = LIBRARY_STATUSES[status]
    if statuses is not None:
        skills = skills.filter(status__in=statuses)
    usages = SkillUsage.objects.filter(skill=OuterRef("pk"))
    changes = (
        SkillEvent.objects.filter(skill=OuterRef("pk"))
        .exclude(kind__in=NOT_CHANGES)
        .order_by("-created_at", "-id")
    )
    usage_count = usages.order_by().values("skill").annotate(n=Count("id")).values("n")
    return skills.annotate(
        current_number=F("current_version__number"),
        usage_count=Coalesce(Subquery(usage_count), 0),
        last_used=Subquery(usages.order_by("-created_at").values("created_at")[:1]),
        last_change_at=Subquery(changes.values("created_at")[:1]),
        last_change_kind=Subquery(changes.values("kind")[:1]),
    )


def skill_library_categories(*, audience: Q | None = None) -> list[str]:
    """Every category that a skill of `audience` (team only without one) with content has,
    archived ones included, by name."""
    return list(
        Skill.objects.filter(
            audience if audience is not None else TEAM_ONLY, current_version__isnull=False
        )
        .exclude(category="")
        .order_by("category")
        .values_list("category", flat=True)
        .distinct()
    )


def skill_version(skill: Skill, number: int) -> SkillVersion | None:
    """Version `number` of `skill`, or None."""
    return skill.versions.filter(number=number).first()


def skill_version_numbers(skill: Skill) -> list[int]:
    """The numbers of every version of `skill`, newest first."""
    return list(skill.versions.order_by("-number").values_list("number", flat=True))


def skills_existing(names, *, audience: Q | None = None) -> set[str]:
    """Which of `names` are skills of `audience` (team only without one) with content
    (archived ones too: their pages exist)."""
    skills = Skill.objects.filter(
        audience if audience is not None else TEAM_ONLY,
        slug__in=list(names),
        current_version__isnull=False,
    )
    return set(skills.values_list("slug", flat=True))


def readable_chat_ids(person, chat_ids) -> set[int]:
    """Which of `chat_ids` (None ignored) `person` may read: one query, none for no ids."""
    ids = {chat_id for chat_id in chat_ids if chat_id is not None}
    if not ids:
        return set()
    return set(chats_readable_by(person).filter(pk__in=ids).values_list("pk", flat=True))


def _shown_chat(chat: Chat | None, readable: set[int]) -> tuple[Chat | None, bool]:
    """(the chat if the viewer may read it, whether a chat was left unnamed)."""
    if chat is None:
        return None, False
    if chat.pk in readable:
        return chat, False
    return None, True


def _who(person, actor) -> str:
    if person is not None:
        return person.get_username()
    if actor is not None:
        return actor.display_name
    return ""


@dataclass(frozen=True)
class VersionRow:
    """A version as the skill page lists it. `chat` is None unless the viewer may read the
    source chat; `chat_hidden` says there was one they are not in."""

    number: int
    change: str
    author: str
    at: datetime
    reason: str
    chat: Chat | None
    chat_hidden: bool
    same_as_current: bool = False  # its content is the current version's (no rollback)


@dataclass(frozen=True)
class EventRow:
    """One line of the audit trail as the skill page shows it (same chat rule as VersionRow).
    `text_hidden`: the text of a change that never became a version (proposed, blocked,
    rejected) is left out for this viewer; see `skill_event_rows`."""

    kind: str
    kind_label: str
    via: str
    who: str
    at: datetime
    version: int | None
    path: str
    before: str
    after: str
    detail: dict
    chat: Chat | None
    chat_hidden: bool
    text_hidden: bool = False

    @property
    def findings(self) -> list[dict]:
        """What the scanner found in a blocked write: [{"path", "summary"}]."""
        found = self.detail.get("findings")
        return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []

    @property
    def pre_existing(self) -> list[tuple[str, str]]:
        """(path, findings) the version before already had, listed for a reviewer."""
        found = self.detail.get("pre_existing_findings")
        if not isinstance(found, dict):
            return []
        return [
            (path, "; ".join(map(str, items)) if isinstance(items, list) else str(items))
            for path, items in found.items()
        ]

    @property
    def facts(self) -> list[tuple[str, str]]:
        """The other details (versions, match level, action…) as (label, text)."""
        shown = []
        for key, value in self.detail.items():
            if key in ("findings", "pre_existing_findings"):
                continue
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            shown.append((key.replace("_", " "), text))
        return shown


@dataclass(frozen=True)
class UsageRow:
    """One load of a skill by a turn (same chat rule as VersionRow); `outcome` is the
    turn's status, `tool_errors` whether one of its tool calls failed."""

    at: datetime
    version: int | None
    path: str
    outcome: str
    tool_errors: bool
    chat: Chat | None
    chat_hidden: bool


def skill_version_rows(skill: Skill, *, person, limit: int = 100) -> list[VersionRow]:
    """The newest `limit` versions of `skill` for `person`: a source chat they may not read
    is never named (only that there was one)."""
    versions = list(
        skill_versions(skill).select_related("source_chat").defer(*VERSION_CONTENT)[:limit]
    )
    readable = readable_chat_ids(person, (v.source_chat_id for v in versions))
    current_hash = skill.current_version.content_hash if skill.current_version else None
    rows = []
    for version in versions:
        chat, hidden = _shown_chat(version.source_chat, readable)
        rows.append(
            VersionRow(
                number=version.number,
                change=version.change,
                author=_who(version.author_person, version.author_actor),
                at=version.created_at,
                reason=version.reason,
                chat=chat,
                chat_hidden=hidden,
                same_as_current=version.content_hash == current_hash,
            )
        )
    return rows


def unreviewed_text_readable(
    *, reviewer: bool, person_id, writer_id, chat_id, readable: set[int]
) -> bool:
    """The rule for text that never became a version (a proposal, a blocked or rejected
    write): may the viewer read it? Skill reviewers, the person who wrote it and the readers
    of the chat it came from (`readable`: `readable_chat_ids` of the viewer) may."""
    return (
        reviewer
        or (person_id is not None and writer_id == person_id)
        or (chat_id is not None and chat_id in readable)
    )


def skill_event_rows(skill: Skill, *, person, limit: int = 100) -> list[EventRow]:
    """The newest `limit` events of `skill`'s audit trail, newest first, for `person`: a chat
    they may not read is never named. Text that never became a version (a proposal, a write
    the scanner blocked, which may hold the very secret it was blocked for) is shown only to
    skill reviewers, to the person who wrote it and to readers of its chat; others see that
    the event happened, not its text or findings."""
    events = list(
        skill_events(skill)
        .select_related("chat")
        .defer(*LINKED_VERSION_CONTENT)
        .order_by("-created_at", "-id")[:limit]
    )
    readable = readable_chat_ids(person, (event.chat_id for event in events))
    reviewer = policy.may_review(person)
    person_id = getattr(person, "pk", None)
    rows = []
    for event in events:
        chat, hidden = _shown_chat(event.chat, readable)
        text_hidden = event.kind in UNREVIEWED_TEXT and not unreviewed_text_readable(
            reviewer=reviewer,
            person_id=person_id,
            writer_id=event.person_id,
            chat_id=event.chat_id,
            readable=readable,
        )
        detail = event.detail or {}
        if text_hidden:
            detail = {
                key: value
                for key, value in detail.items()
                if key not in ("findings", "pre_existing_findings")
            }
        rows.append(
            EventRow(
                kind=event.kind,
                kind_label=event.get_kind_display(),
                via=event.get_via_display(),
                who=_who(event.person, event.actor),
                at=event.created_at,
                version=event.version.number if event.version else None,
                path=event.path,
                before="" if text_hidden else event.before,
                after="" if text_hidden else event.after,
                detail=detail,
                chat=chat,
                chat_hidden=hidden,
                text_hidden=text_hidden,
            )
        )
    return rows


def skill_usage_rows(skill: Skill, *, person, limit: int = 50) -> list[UsageRow]:
    """The newest `limit` loads of `skill` with their turns' outcomes, for `person`: a chat
    they may not read is never named (the row stays: counts include it)."""
    usage = skill_usage(skill, limit=limit)
    readable = readable_chat_ids(person, (row["chat"].pk for row in usage if row["chat"]))
    rows = []
    for row in usage:
        chat, hidden = _shown_chat(row["chat"], readable)
        rows.append(
            UsageRow(
                at=row["at"],
                version=row["version"],
                path=row["path"],
                outcome=row["outcome"],
                tool_errors=row["tool_errors"],
                chat=chat,
                chat_hidden=hidden,
            )
        )
    return rows
