"""Notifications other apps may listen to. They announce what already happened (after
commit); they never carry a state change of their own."""

from django.dispatch import Signal

# Sent after an Actor was linked to a Person (or moved to another one): `actor`, `person`,
# `previous_person` (None when the actor had no Person before).
actor_linked = Signal()

# Sent once a turn's outcome is committed and its final event published
# (`chats.agent.turns.turn_announce_finished`, called by the turn loop): `turn` (its fields as
# stored) and `status` (completed / failed / interrupted). Receivers run in the worker after
# people already saw the outcome: keep them cheap; a failing one is logged and never affects
# the turn. A turn whose lease was lost (stored nothing) sends nothing.
turn_finished = Signal()

# Sent when the hub posts a notice into a chat (`chats.notices.chat_notice_post`), inside the
# transaction that stores it: `chat` and `message` (a system message, metadata["notice"] set).
# The Telegram bridge listens to deliver it to a Telegram chat; a receiver's failure is logged
# and never loses the notice.
notice_posted = Signal()
