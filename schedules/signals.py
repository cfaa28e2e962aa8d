"""What schedules announce to other apps (after commit; receivers must not change schedules)."""

from django.dispatch import Signal

# A schedule the agent made in a shared chat waits for a chat admin: `schedule` (pending).
# The Telegram bridge listens to send Approve / Reject buttons to the chat's admins.
proposal_created = Signal()
