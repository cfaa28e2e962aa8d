"""The skills section of the Approvals page and badge: pending skill proposals, shown only
to skill reviewers (`skill_proposals_reviewable` returns nothing for anyone else).

Each proposal is shown as the reviewer will decide it: the diff against the version it was
based on (everything added for a new skill), whether the skill moved on since (then it can
no longer be approved: any decision marks it superseded), where it was asked for (a chat is
named only to people who may read it) and which background review made it. The queries of
the section do not grow with the number of proposals.
"""

from dataclasses import dataclass, field

from django.db.models import Q

from chats.approvals import ApprovalSection
from chats.labels import token_owner_names
from chats.models import Chat
from skills import policy
from skills.diff import FileDiff, content_diff
from skills.models import Skill, SkillEvent, SkillProposal, SkillVersion
from skills.selectors import readable_chat_ids, skill_proposals_reviewable

SHOWN_LIMIT = 20  # proposals shown at once, oldest first: each one carries a whole diff
COLLAPSED_ROWS = 40  # a change whose diff has more rows starts collapsed

ACTION_LABELS = {
    "create": "create",
    "patch": "patch",
    "edit": "edit",
    "delete": "archive",
    "write_file": "write file",
    "remove_file": "remove file",
}


@dataclass
class ProposalItem:
    """One pending proposal as the Approvals page shows it."""

    proposal: SkillProposal
    current_number: int | None  # the skill's version now; None: no such skill (yet)
    diffs: list[FileDiff] = field(default_factory=list)
    where: Chat | None = None
    where_readable: bool = False
    origin: str = ""  # "proposed by the review after turn N", or ""
    notice: str = ""  # why it is shown again (a refused decision), or ""

    @property
    def stale(self) -> bool:
        """The skill moved on since the version this proposal was based on."""
        return self.current_number != self.proposal.base_number

    @property
    def shown_version(self) -> str:
        """What the decision form posts back: the base version ("" for a new skill)."""
        base = self.proposal.base_number
        return "" if base is None else str(base)

    @property
    def added(self) -> int:
        return sum(diff.added for diff in self.diffs)

    @property
    def removed(self) -> int:
        return sum(diff.removed for diff in self.diffs)

    @property
    def changed_lines(self) -> int:
        return self.added + self.removed

    @property
    def collapsed(self) -> bool:
        """A long diff starts folded, so one change does not bury the others."""
        return sum(len(diff.rows) for diff in self.diffs) > COLLAPSED_ROWS

    @property
    def action_label(self) -> str:
        return ACTION_LABELS.get(self.proposal.action, self.proposal.action.replace("_", " "))


def pending_count(person) -> int:
    """Skill proposals waiting for `person` (0 unless they are a skill reviewer)."""
    return skill_proposals_reviewable(person).count()


def _items(person, proposals: list[SkillProposal]) -> list[ProposalItem]:
    """Items for `proposals` in five queries whatever their number: the skills now, the base
    versions, the source chats `person` may read, and the owners of API tokens whose users
    proposed (none without such a proposal)."""
    if not proposals:
        return []
    skills = {
        slug: (pk, number)
        for slug, pk, number in Skill.objects.filter(
            slug__in={proposal.slug for proposal in proposals}
        ).values_list("slug", "pk", "current_version__number")
    }
    wanted = Q(pk__in=[])
    for proposal in proposals:
        if proposal.base_number is not None and proposal.slug in skills:
            wanted |= Q(skill_id=skills[proposal.slug][0], number=proposal.base_number)
    bases = {
        (version.skill_id, version.number): version
        for version in SkillVersion.objects.filter(wanted).only(
            "skill_id", "number", "skill_md", "files"
        )
    }
    readable = readable_chat_ids(person, [proposal.source_chat_id for proposal in proposals])
    owners = token_owner_names(proposal.author_actor for proposal in proposals)
    items = []
    for proposal in proposals:
        proposal._token_owners = owners  # author_label names API users by their token's owner
        skill_pk, number = skills.get(proposal.slug, (None, None))
        base = bases.get((skill_pk, proposal.base_number))
        if proposal.action == "delete":
            diffs = []  # archiving leaves the content as it is
        else:
            diffs = content_diff(
                base.skill_md if base else None,
                base.files if base else None,
                proposal.skill_md,
                proposal.files,
            )
        items.append(
            ProposalItem(
                proposal=proposal,
                current_number=number,
                diffs=diffs,
                where=proposal.source_chat,
                where_readable=proposal.source_chat_id in readable,
                origin=proposal.origin_label,
            )
        )
    return items


def _reviewable(person):
    return skill_proposals_reviewable(person).select_related("review")


def section_context(person) -> dict:
    """The section for `person`: the oldest SHOWN_LIMIT pending proposals as items and how
    many wait in all; nothing for anyone who is not a skill reviewer."""
    proposals = _reviewable(person)
    shown = list(proposals[:SHOWN_LIMIT])
    total = len(shown) if len(shown) < SHOWN_LIMIT else proposals.count()
    return {"skill_proposals": _items(person, shown), "skill_proposals_total": total}


def proposal_item(person, proposal_id: int, *, notice: str = "") -> ProposalItem | None:
    """One pending proposal as an item, with `notice` on top, if `person` may decide it."""
    proposals = list(_reviewable(person).filter(pk=proposal_id))
    items = _items(person, proposals)
    if not items:
        return None
    items[0].notice = notice
    return items[0]


def proposal_decided(person, proposal_id: int) -> SkillProposal | None:
    """A proposal as it stands, with who decided it and the version it made, for a skill
    reviewer's answer after a decision; None if there is none or `person` is no reviewer."""
    if not policy.may_review(person):
        return None
    return (
        SkillProposal.objects.select_related("decided_by", "result_version")
        .filter(pk=proposal_id)
        .first()
    )


def skill_version_now(slug: str) -> int | None:
    """The current version number of the skill called `slug`, or None."""
    row = Skill.objects.filter(slug=slug).values_list("current_version__number", flat=True)
    return row.first()


def proposal_block_findings(proposal_id: int) -> list[dict]:
    """What the scanner found when it blocked the approval of this proposal (its latest
    "blocked" audit event): [{"path", "summary"}], or []."""
    event = (
        SkillEvent.objects.filter(proposal_id=proposal_id, kind=SkillEvent.Kind.BLOCKED)
        .order_by("-created_at", "-id")
        .first()
    )
    return list(event.detail.get("findings", [])) if event is not None else []


approval_section = ApprovalSection(
    name="skills",
    count=pending_count,
    template="skills/approvals.html#section",
    context=section_context,
    order=20,
)
