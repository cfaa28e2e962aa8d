"""Schedule approvals by Telegram inline buttons.

When the schedules app announces a schedule the agent proposed in a shared chat
(`schedules.signals.proposal_created`), each of that chat's admins with a Telegram account
gets a message with Approve / Reject buttons in their private chat. A press calls the same
service as the Approvals page with the presser's linked person as the decider (the service
decides who is entitled: the chat's owners and admins), then the message shows the outcome.
Callback data is `sch:<schedule id>:a|r` (at most 24 bytes of Telegram's 64); it names a
decision, never a decider. A press outside the presser's own private chat decides nothing
(the rule of every decision button), and a second press finds it decided.
"""

from __future__ import annotations

import html
import logging
import re
from typing import TYPE_CHECKING

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

CALLBACK_RE = re.compile(r"^sch:(\d{1,18}):([ar])$")


def _keyboard(schedule_id: int) -> dict:
    return {
        "inline_keyboard": [
            [
                {"text": "✅ Approve", "callback_data": f"sch:{schedule_id}:a"},
                {"text": "✖️ Reject", "callback_data": f"sch:{schedule_id}:r"},
            ]
        ]
    }


def _quote(text: str) -> str:
    return f"<blockquote>{html.escape(reveal_hidden(text))}</blockquote>"


def prompt_text(schedule) -> str:
    """The HTML of an approval request: when, where, who asked and what it will say."""
    from schedules.selectors import schedule_description

    where = schedule.chat.title or schedule.chat.chat_key
    return (
        f"⏰ {html.escape(schedule.owner.get_username())} asked me to run this in "
        f"<b>{html.escape(reveal_hidden(where))}</b>, "
        f"{html.escape(schedule_description(schedule))}:\n\n{_quote(schedule.prompt)}\n"
        "It runs only if a chat admin approves it."
    )


def schedule_proposal_notify(*, schedule) -> list[OutboundMessage]:
    """Queue an Approve/Reject message to every Telegram account of the chat's admins."""
    from schedules.proposals import schedule_review_recipients

    rows = []
    for actor in schedule_review_recipients(schedule=schedule, channel=Channel.TELEGRAM):
        try:
            chat_id = int(actor.external_id)  # a user's private chat id is their user id
        except ValueError:
            continue
        rows.append(
            outbox_send(
                telegram_chat_id=chat_id,
                text=prompt_text(schedule),
                reply_markup=_keyboard(schedule.pk),
                extra={"schedule_id": schedule.pk},
            )
        )
    return rows


def on_proposal_created(sender=None, schedule=None, **kwargs) -> None:
    """Receiver of `schedules.signals.proposal_created` (sent after commit)."""
    if schedule is None:
        return
    from django.conf import settings

    if not settings.TELEGRAM_BOT_TOKEN:
        return
    try:
        schedule_proposal_notify(schedule=schedule)
    except Exception:  # noqa: BLE001 - a notification must never break the proposal
        logger.exception("could not queue Telegram approval messages for schedule %s", schedule.pk)


def callback_query_apply(query: CallbackQuery, identity: BotIdentity):
    """Apply a button press: a decision on a schedule by the presser, or a polite no-op."""
    match = CALLBACK_RE.match(query.data or "")
    if match is None:
        return UpdateOutcome(
            "callback:unknown", outbound=[callback_answer(query, "This button is old.")]
        )
    if not in_own_private_chat(query):
        text = "Schedules are approved in your private chat with me."
        return UpdateOutcome("schedule:not private", outbound=[callback_answer(query, text)])
    try:
        from schedules.proposals import (
            ApprovalInvalid,
            ApprovalNotAllowed,
            ApprovalStale,
            schedule_approval_decide,
        )
    except ImportError:
        return UpdateOutcome(
            "callback:no schedules", outbound=[callback_answer(query, "Schedules are off.")]
        )
    schedule_id = int(match.group(1))
    decision = "approve" if match.group(2) == "a" else "reject"
    presser = query.from_user
    actor = actor_get_or_create(
        channel=Channel.TELEGRAM, user_id=presser.id, display_name=display_name(presser)
    )
    try:
        schedule = schedule_approval_decide(
            schedule_id=schedule_id, decision=decision, person=actor.person
        )
    except ApprovalNotAllowed:
        answer = callback_answer(query, "Only an admin of that chat can decide this.")
        return UpdateOutcome("schedule:not allowed", outbound=[answer])
    except (ApprovalStale, ApprovalInvalid) as exc:
        outbound = [callback_answer(query, f"{exc}"[:190])]
        outbound += callback_edit(query, f"⏰ {html.escape(str(exc))}")
        return UpdateOutcome("schedule:decided", outbound=outbound)
    verb = "Approved" if decision == "approve" else "Rejected"
    text = (
        f"⏰ {_quote(schedule.prompt)}\n"
        f"{'✅' if decision == 'approve' else '✖️'} {verb} by {html.escape(display_name(presser))}."
    )
    outbound = [callback_answer(query, f"{verb}.")]
    outbound += callback_edit(query, text)
    return UpdateOutcome(f"schedule:{decision}", outbound=outbound)
