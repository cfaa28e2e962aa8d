"""The skills section of the Approvals page and badge: pending skill proposals, shown only
to skill reviewers (`skill_proposals_reviewable` returns nothing for anyone else).

Each proposal is shown as the reviewer will decide it: the diff against the version it was
based on (everything added for a new skill), whether the skill moved on since (then it can
no longer be approved: any decision marks it superseded), where it was asked for (a chat is
named only to people who may read it) and which background review made it. The queries of
the section do not grow with the number of proposals. Each item has a box for the page's
bulk decisions (`bulk_parse`, `bulk_decide`), bound to the version shown like its own form.
"""

from dataclasses import dataclass, field

from django.db.models import Q

from chats.approvals import ApprovalSection, BulkInvalid, BulkOutcome
from chats.labels import token_owner_names
from chats.models import Chat
from chats.work_sources import readable_keys, sources_shown
from skills import policy
from skills.diff import FileDiff, content_diff_cached
from skills.forms import MAX_NUMBER
from skills.models import Skill, SkillEvent, SkillProposal, SkillVersion, Via
from skills.reviews import skill_proposal_decide
from skills.selectors import readable_chat_ids, skill_proposals_reviewable
from skills.services import SkillConflict, SkillInvalid, SkillNotAllowed, SkillStale

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
    # The files it drew on, linked for a reader of their chat (chats.work_sources).
    files: list = field(default_factory=list)
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
            "skill_id", "number", "skill_md", "files", "content_hash"
        )
    }
    chat_ids = [proposal.source_chat_id for proposal in proposals]
    chat_ids += [source.get("chat_id") for proposal in proposals for source in proposal.sources]
    readable = readable_chat_ids(person, chat_ids)
    keys = readable_keys(person, [s for proposal in proposals for s in proposal.sources])
    owners = token_owner_names(proposal.author_actor for proposal in proposals)
    items = []
    for proposal in proposals:
        proposal._token_owners = owners  # author_label names API users by their token's owner
        skill_pk, number = skills.get(proposal.slug, (None, None))
        base = bases.get((skill_pk, proposal.base_number))
        if proposal.action == "delete":
            diffs = []  # archiving leaves the content as it is
        else:
            # Computed once per (base, proposal) content pair, then read from the cache.
            diffs = content_diff_cached(before=base, after=proposal)
        items.append(
            ProposalItem(
                proposal=proposal,
                current_number=number,
                diffs=diffs,
                where=proposal.source_chat,
                where_readable=proposal.source_chat_id in readable,
                files=sources_shown(proposal.sources, readable, keys),
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


# --- what a decision did, as the page words it ---------------------------------------------

SHOWN_ANOTHER_VERSION = (
    "Nothing was decided: this proposal was shown against another version. Review it again."
)


@dataclass(frozen=True)
class Outcome:
    kind: str  # approved, rejected, superseded, blocked, decided, expired (a CSS label too)
    text: str  # after the skill's name
    refused: bool = False

    @property
    def label(self) -> str:
        return "already decided" if self.kind == "decided" else self.kind

    def line(self, slug: str) -> str:
        """One sentence for a message or a bulk decision's report."""
        return f"{self.label.capitalize()}: {slug} {self.text}"


def outcome_approved(proposal: SkillProposal) -> Outcome:
    """What an approval did to the skill."""
    if proposal.action == "delete":
        return Outcome("approved", "is archived (a skill reviewer can restore it).")
    number = proposal.result_version.number if proposal.result_version else None
    if proposal.action == "create":
        return Outcome("approved", f"is created (version {number}).")
    return Outcome("approved", f"is now at version {number}.")


def outcome_rejected(proposal: SkillProposal) -> Outcome:
    """What a rejection left as it was."""
    if proposal.action == "create":
        return Outcome("rejected", "was not created.")
    return Outcome("rejected", "stays as it was.")


def outcome_superseded(slug: str) -> Outcome:
    """The skill moved on since the proposal: nothing applied, the proposal is superseded."""
    number = skill_version_now(slug)
    now = f" (it is at version {number} now)" if number is not None else ""
    return Outcome(
        "superseded",
        f"changed since this proposal was made{now}: nothing was applied, the proposal is "
        "superseded.",
        refused=True,
    )


def outcome_already(proposal: SkillProposal) -> Outcome:
    """Someone (or something) decided the proposal before this decision."""
    if proposal.status == SkillProposal.Status.SUPERSEDED:
        return outcome_superseded(proposal.slug)
    if proposal.status == SkillProposal.Status.EXPIRED:
        return Outcome("expired", "expired before your decision: nothing was changed.", True)
    by = f" by {proposal.decided_by.get_username()}" if proposal.decided_by else ""
    status = proposal.get_status_display().lower()
    return Outcome("decided", f"was {status}{by} before your decision.", refused=True)


def outcome_blocked(proposal_id: int) -> Outcome:
    """The scanner blocked the approval: the proposal is rejected, with what it found."""
    findings = proposal_block_findings(proposal_id)
    found = "; ".join(f"{item.get('path', '')}: {item.get('summary', '')}" for item in findings)
    return Outcome(
        "blocked",
        f"was not changed: the scanner blocked this proposal ({found or 'see the audit trail'})"
        ". It is rejected.",
        refused=True,
    )


# --- the page's bulk decisions --------------------------------------------------------------


def bulk_parse(values: list[str]) -> list[tuple[int, int | None]]:
    """The ticked skill changes (`<proposal id>:<shown version>`, the version empty for a new
    skill) as (id, shown version) pairs, deduplicated, in order; at most SHOWN_LIMIT, as many
    as the page shows (each approval scans a whole skill). Raises BulkInvalid otherwise."""
    picked: dict[int, int | None] = {}
    for raw in values:
        number, sep, shown = str(raw).partition(":")
        if not (sep and number.isdecimal() and (shown == "" or shown.isdecimal())):
            raise BulkInvalid("Unknown proposal.")
        proposal_id = int(number)
        version = int(shown) if shown else None
        # Bounded like the pages' forms: PostgreSQL's integer column refuses a larger number.
        if not all(0 < n <= MAX_NUMBER for n in (proposal_id, version) if n is not None):
            raise BulkInvalid("Unknown proposal.")
        picked.setdefault(proposal_id, version)
    if len(picked) > SHOWN_LIMIT:
        raise BulkInvalid(f"Select at most {SHOWN_LIMIT} skill changes at once.")
    return list(picked.items())


def bulk_decide(person, decision: str, picked: list[tuple[int, int | None]]) -> BulkOutcome:
    """Decide each picked skill change as the skill reviewer `person`, bound to the version
    the page showed, one audited decision each (via="dashboard"); what could not be decided
    is reported (a change `person` may not decide by its number only) and the rest happens."""
    outcome = BulkOutcome()
    for proposal_id, shown in picked:
        try:
            skill_proposal_decide(
                proposal_id=proposal_id,
                decision=decision,
                shown_version=shown,
                person=person,
                via=Via.DASHBOARD,
            )
        except (SkillNotAllowed, SkillConflict, SkillInvalid) as exc:
            outcome.failures.append(_refusal(person, proposal_id, exc))
        else:
            outcome.done += 1
    return outcome


def _refusal(person, proposal_id: int, exc: Exception) -> str:
    proposal = None if isinstance(exc, SkillNotAllowed) else proposal_decided(person, proposal_id)
    if proposal is None:
        return f"skill change #{proposal_id}: not found."
    if isinstance(exc, SkillInvalid):
        return outcome_blocked(proposal_id).line(proposal.slug)
    if isinstance(exc, SkillStale) and proposal.status == SkillProposal.Status.PENDING:
        return f"{proposal.slug}: {SHOWN_ANOTHER_VERSION}"
    if isinstance(exc, SkillStale):
        return outcome_superseded(proposal.slug).line(proposal.slug)
    return outcome_already(proposal).line(proposal.slug)


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
    bulk_field="skill",
    bulk_parse=bulk_parse,
    bulk_decide=bulk_decide,
)
