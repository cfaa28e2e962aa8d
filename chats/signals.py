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

# Sent by the turn loop when a model call failed for good: `turn` and `error` (an LLMError;
# `error.kind` names what went wrong). For counting only: receivers must be cheap.
model_error = Signal()

# Sent inside the transaction that stores model work's token counters: a turn's counters
# (`turn_wait`, `turn_finish`, kind "turn") and a compression summary (kind "compression");
# also by an app's model work for one message outside a turn (attachments: kind "vision",
# `turn` None and `message_id` the message it was done for, which decides who spends; and
# kind "extraction", a document's pages read by the hub itself: `calls` the pages, no model,
# no tokens, `duration_ms` the reading time).
# Arguments: `kind`, `chat_id`, `turn` (the turn it was done for, or None), `model`,
# `calls` (model calls), `prompt_tokens`, `completion_tokens`: the work since the counters
# were last stored, so the sums of what is sent equal the stored counters. The usage app
# records it in the same transaction; sent with send_robust, so a failing receiver is logged
# and never loses the turn's outcome.
model_usage = Signal()

# Sent by the turn loop after each tool call's result is stored: `turn`, `name`, `ok` and
# `duration_ms`. For counting only: receivers must be cheap.
tool_call_finished = Signal()

# Sent by the chat WebSocket consumer when a member's socket is accepted (`socket_opened`)
# and when an accepted one closes (`socket_closed`). For counting only: receivers must be
# cheap and must not touch the database (they run on the event loop).
socket_opened = Signal()
socket_closed = Signal()

# Sent by a channel adapter (the Telegram bridge) when a reply it delivered reached its chat,
# every part of it: `turn_id`, `chat_id` and `receipt` (a dict: "channel", and for Telegram
# "telegram_chat_id", "message_thread_id", "telegram_message_ids" (one per part, in order)
# and "parts"). Sent inside the transaction that records the delivery, so a receiver's
# writes commit with it; a receiver's failure is logged and never undoes the delivery.
reply_delivered = Signal()

# Sent by a channel adapter when it gave up on a reply for good: `turn_id`, `chat_id`,
# `error` (what the channel said, e.g. "Forbidden: bot was blocked by the user") and
# `receipt` (what was sent before it gave up, as for `reply_delivered`). Inside the
# transaction that records the failure, like `reply_delivered`.
reply_delivery_failed = Signal()

# Sent once by an entry point that runs turns in its own process (the terminal's
# `manage.py chat`), before its first turn: `kind` ("cli"). The operations app configures
# the process's traces on it, as it does for web and worker processes.
turns_in_process = Signal()

# Sent by `chats.agent.holds` when a held message's turn is requested at last (its files
# ready, its album quiet, or its deadline passed): `turn`, inside the releasing transaction,
# so a channel adapter queues the reply (the Telegram bridge's outbox row) with the turn, as
# it would have when the message arrived.
held_turn_requested = Signal()
