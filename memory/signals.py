"""What memory announces to other apps (after commit; receivers must not change memory)."""

from django.dispatch import Signal

# A change waits for a human decision: `entry` (a MemoryEntry with `pending_change` set).
# The Telegram bridge listens to send Approve / Reject buttons to the entitled people.
proposal_created = Signal()
