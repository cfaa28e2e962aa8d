"""The skills section of the Approvals page and badge: pending skill proposals, shown only
to skill reviewers (`skill_proposals_reviewable` returns nothing for anyone else)."""

from chats.approvals import ApprovalSection
from skills.selectors import skill_proposals_reviewable


def pending_count(person) -> int:
    """Skill proposals waiting for `person` (0 unless they are a skill reviewer)."""
    return skill_proposals_reviewable(person).count()


approval_section = ApprovalSection(name="skills", count=pending_count, order=20)
