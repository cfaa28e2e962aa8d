"""What the skills app announces to other apps (after commit; receivers must not change skills)."""

from django.dispatch import Signal

# A change waits for a skill reviewer: `proposal` (a pending SkillProposal). The Telegram
# bridge listens to send Approve / Reject buttons to the skill reviewers.
proposal_created = Signal()
