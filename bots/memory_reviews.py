"""Memory approvals by Telegram inline buttons.

When the memory app announces a proposal (`memory.signals.proposal_created`), each entitled
reviewer with a Telegram account gets a message with Approve / Reject buttons in their
private chat; a proposal revised by its proposer is announced again with new buttons. A
press calls the same review service as the dashboard with the presser as the reviewer (the
service decides who is entitled) and the revision the message showed, then the message
shows the outcome. Callback data is `mem:<entry id>:<revision>:a|r` (at most 35 bytes of
Telegram's 64); it names a decision and a version, never a reviewer. A button of an older
version decides nothing, and neither does a press outside the presser's own private chat (the
rule of skill buttons too).
"""

from __future__ import annotations

import html
import logging
import re
from typing import TYPE_CHECKING

from django.db import transaction

from bots.callbacks import callback_answer, callback_edit, in_own_private_chat
from bots.models import OutboundMessage
from bots.outbox import UpdateOutcome, outbox_send
from bots.updates import BotIdentity, display_name
from chats.models import Channel
from chats.services import actor_get_or_create
from hermes_site.scanning import reveal_hidden

if TYPE_CHECKING:  # python-telegram-bot loads only where Telegram is spoken
    from telegram import CallbackQuery

logger = logging.getLogger(__name__)

CALLBACK_RE = re.compile(r"^mem:(\d{1,18}):(\d{1,9}):([ar])$")
SCOPE_LABELS = {"user": "about you", "team": "for the whole team", "chat": "for a chat"}


def _keyboard(entry_id: int, revision: int) -> dict:
    return {
        "inline_keyboard": [
            [
                {"text": "✅ Approve", "callback_data": f"mem:{entry_id}:{revision}:a"},
                {"text": "✖️ Reject", "callback_data": f"mem:{entry_id}:{revision}:r"},
            ]
        ]
    }


def _quote(text: str) -> str:
    """Escaped, with hidden code points shown as markers: a reviewer sees what the model
    would read."""
    return f"<blockquote>{html.escape(reveal_hidden(text))}</blockquote>"


def prompt_text(entry) -> str:
    """The HTML of an approval request for `entry`: what would change, exactly as the
    buttons below it decide it."""
    scope = SCOPE_LABELS.get(getattr(entry, "scope", ""), "")
    where = f" {scope}" if scope else ""
    change = getattr(entry, "pending_change", "add")
    if change == "replace":
        body = (
            f"🧠 I would like to change what I remember{where}:\n\n"
            f"{_quote(entry.text)}\nto\n{_quote(entry.proposed_text)}\n"
        )
    elif change == "remove":
        body = f"🧠 I would like to forget this{where}:\n\n{_quote(entry.text)}\n"
    else:
        body = f"🧠 I would like to remember this{where}:\n\n{_quote(entry.text)}\n"
    if getattr(entry, "scope", "") == "user":
        shared = entry.visibility == "shared"
        body += "Shared: also used in groups.\n" if shared else "Private: only in your chats.\n"
    return body + "Approve it to let me use it in later conversations."


def memory_proposal_notify(*, entry) -> list[OutboundMessage]:
    """Queue an Approve/Reject message to every Telegram reviewer entitled to decide `entry`."""
    from memory.selectors import memory_review_recipients

    rows = []
    for actor in memory_review_recipients(entry=entry, channel=Channel.TELEGRAM):
        try:
            chat_id = int(actor.external_id)  # a user's private chat id is their user id
        except ValueError:
            continue
        rows.append(
            outbox_send(
                telegram_chat_id=chat_id,
                text=prompt_text(entry),
                reply_markup=_keyboard(entry.pk, entry.revision),
                extra={"memory_entry_id": entry.pk, "memory_revision": entry.revision},
            )
        )
    return rows


def on_proposal_created(sender=None, entry=None, **kwargs) -> None:
    """Receiver of `memory.signals.proposal_created` (sent after commit)."""
    if entry is None:
        return
    from django.conf import settings

    if not settings.TELEGRAM_BOT_TOKEN:
        return
    try:
        memory_proposal_notify(entry=entry)
    except Exception:  # noqa: BLE001 - a notification must never break the proposal
        logger.exception("could not queue Telegram review messages for memory entry %s", entry.pk)


def callback_query_apply(query: CallbackQuery, identity: BotIdentity):
    """Apply a button press: a memory decision by the presser, or a polite no-op."""
    match = CALLBACK_RE.match(query.data or "")
    if match is None:
        return UpdateOutcome(
            "callback:unknown", outbound=[callback_answer(query, "This button is old.")]
        )
    if not in_own_private_chat(query):
        text = "Memory proposals are decided in your private chat with me."
        return UpdateOutcome("memory:not private", outbound=[callback_answer(query, text)])
    try:
        from memory.models import MemoryEvent
        from memory.reviews import memory_review
        from memory.services import (
            ReviewConflict,
            ReviewInvalid,
            ReviewNotAllowed,
            ReviewStale,
        )
    except ImportError:
        return UpdateOutcome(
            "callback:no memory", outbound=[callback_answer(query, "Memory is off.")]
        )
    entry_id, revision = int(match.group(1)), int(match.group(2))
    decision = "approve" if match.group(3) == "a" else "reject"
    presser = query.from_user
    actor = actor_get_or_create(
        channel=Channel.TELEGRAM, user_id=presser.id, display_name=display_name(presser)
    )
    try:
        with transaction.atomic():
            entry = memory_review(
                entry_id=entry_id,
                decision=decision,
                revision=revision,
                person=actor.person,
                actor=actor,
                via=MemoryEvent.Via.TELEGRAM,
            )
    except ReviewNotAllowed:
        answer = callback_answer(
            query, "Only the person this is about, or a reviewer, can decide this."
        )
        return UpdateOutcome("memory:not allowed", outbound=[answer])
    except ReviewStale as exc:
        outbound = [callback_answer(query, f"{exc}.")]
        edit = callback_edit(
            query, f"🧠 {html.escape(str(exc))} (sent to you again with the new text)."
        )
        return UpdateOutcome("memory:stale", outbound=outbound + edit)
    except (ReviewConflict, ReviewInvalid):
        outbound = [callback_answer(query, "Already decided (or expired).")]
        edit = callback_edit(query, "🧠 This proposal was already decided or has expired.")
        return UpdateOutcome("memory:conflict", outbound=outbound + edit)
    verb = "Approved" if decision == "approve" else "Rejected"
    text = (
        f"🧠 {_quote(entry.text)}\n"
        f"{'✅' if decision == 'approve' else '✖️'} {verb} by {html.escape(display_name(presser))}."
    )
    outbound = [callback_answer(query, f"{verb}.")]
    outbound += callback_edit(query, text)
    return UpdateOutcome(f"memory:{decision}", outbound=outbound)
