"""Approval of risky tool calls by Telegram inline buttons.

When a tool call waits for a decider (`toolservers.approvals.approval_requested`, sent after
commit), every decider of the call's chat (`toolservers.policy.may_decide`: the person alone
in their own chat, the owners and admins of a shared chat, staff) who linked a Telegram
account gets the card in their private chat with the bot: the exact server and tool, every
argument by its path within Telegram's limit (`toolservers.approval_arguments`: shortest
first, so a long value never hides a short one; escaped; hidden code points shown as
markers), how much of them it shows and a link to the full view on the dashboard (a button
too when DASHBOARD_URL is not a loopback address, which Telegram refuses), who asked, in
which chat and until when, with **Approve / Decline / Always allow here** buttons. When the
chat is itself a Telegram group or forum topic, the group (in that topic) reads a short
notice that a call of the tool waits for a decider: no buttons, no arguments.

A press calls the one decision service (`approval_decide`, via "telegram") as the presser's
linked person, read from the update's sender, never from the button. Callback data is
`tool:<card id>:<nonce>:a|d|w` (at most 58 bytes of Telegram's 64): it names a card and a
decision, never a person. Forged data (an unknown card, a wrong nonce, a malformed string),
a stale card (decided, expired, void), a presser who is not a decider and a press outside the
presser's own private chat decide nothing; the answer says why.

When the card is decided, expires or becomes void (`approval_decided`), every copy of it
already sent is edited to show the outcome, without buttons; a copy still waiting in the
outbox goes out in its decided form. The group reads who decided.
"""

from __future__ import annotations

import html
import logging
import re
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q

from bots.callbacks import callback_answer, callback_edit, in_own_private_chat
from bots.models import OutboundMessage
from bots.outbox import UpdateOutcome, outbox_send
from bots.telegram_format import TELEGRAM_LIMIT, utf16_len
from bots.updates import BotIdentity, display_name
from chats.models import Actor, Channel, Chat, ChatKind
from chats.services import actor_get_or_create
from hermes_site.scanning import reveal_hidden
from toolservers.approval_arguments import arguments_preview, full_view_url, is_public
from toolservers.approvals import Decision, approval_card, approval_decide
from toolservers.models import ToolApproval
from toolservers.policy import may_decide

if TYPE_CHECKING:  # python-telegram-bot loads only where Telegram is spoken
    from telegram import CallbackQuery

logger = logging.getLogger(__name__)

CALLBACK_RE = re.compile(r"^tool:(\d{1,18}):([A-Za-z0-9_-]{1,32}):([adw])$")
ICON = "🔐"
NAME_CHARS = 120
TITLE_CHARS = 120
MARGIN = 16  # room kept free below Telegram's limit, as for skill cards
NOTE_CHARS = 80  # room kept for "Showing … of … characters, … of … values"
GROUP_KINDS = (ChatKind.GROUP, ChatKind.TOPIC)
OUTCOMES = {
    ToolApproval.Status.APPROVED: "✅ Approved by {who}: the call runs now.",
    ToolApproval.Status.DENIED: "✖️ Declined by {who}: the call was not run.",
    ToolApproval.Status.EXPIRED: "⌛ No decision in time: the call was not run.",
    ToolApproval.Status.CANCELLED: (
        "⏹ Void: the reply that asked for it was stopped or replaced; nothing was run."
    ),
}
# What the group reads once the card is decided (the tool's name only, never arguments).
GROUP_OUTCOMES = {
    ToolApproval.Status.APPROVED: "✅ The call of {tool} was approved by {who}.",
    ToolApproval.Status.DENIED: "✖️ The call of {tool} was declined by {who}; it was not run.",
    ToolApproval.Status.EXPIRED: "⌛ Nobody decided the call of {tool} in time; it was not run.",
    ToolApproval.Status.CANCELLED: "⏹ The call of {tool} no longer waits; it was not run.",
}


# --- what a card shows ---------------------------------------------------------------------


def _text(value: str, limit: int | None = None) -> str:
    """Untrusted text as Telegram HTML: hidden code points shown as markers, escaped, cut."""
    value = reveal_hidden(value or "")
    if limit is not None and len(value) > limit:
        value = value[: limit - 1].rstrip() + "…"
    return html.escape(value, quote=False)


def _fit(text: str, units: int) -> str:
    """`text` within `units` UTF-16 code units, a "…" line marking a cut."""
    if utf16_len(text) <= units:
        return text
    out, used = [], 0
    for char in text:
        size = utf16_len(char)
        if used + size > units - 2:
            break
        out.append(char)
        used += size
    return "".join(out).rstrip() + "\n…"


def _visible_len(markup: str) -> int:
    return utf16_len(html.unescape(re.sub(r"<[^<>]*>", "", markup)))


def _chat_label(chat: Chat) -> str:
    kind = chat.get_kind_display().lower()
    if chat.title:
        return f"“{_text(chat.title, TITLE_CHARS)}” ({kind})"
    return f"a {kind}"


def _head(approval: ToolApproval, card: dict) -> str:
    lines = [
        f"{ICON} <b>A tool call waits for your decision</b>",
        f"Tool: <code>{_text(card['tool'], NAME_CHARS)}</code> "
        f"on server <code>{_text(card['server'], NAME_CHARS)}</code>",
    ]
    who = _text(card["requested_by"], NAME_CHARS) or "someone"
    lines.append(f"Asked by {who} in {_chat_label(approval.chat)}")
    return "\n".join(lines)


def _full_view_line(url: str, note: str) -> str:
    """What the card says of the full view: the cut plainly, and where all of it is."""
    lead = f"{_text(note)} — see all" if note else "All arguments"
    if is_public(url):
        return f'{lead}: <a href="{html.escape(url)}">on the dashboard</a>'
    return f"{lead} on the dashboard: <code>{html.escape(url)}</code>"


def card_text(approval: ToolApproval, *, outcome: str = "") -> str:
    """The HTML of the card of `approval`: what the buttons decide, within Telegram's 4,096
    characters; with `outcome` (a decided card) that line instead of the deadline."""
    card = approval_card(approval)
    head = _head(approval, card)
    if outcome:
        tail = outcome
    else:
        until = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        tail = f"Decide by {until}; with no decision by then the call is not run."
    url = full_view_url(approval)
    room = (
        TELEGRAM_LIMIT
        - MARGIN
        - _visible_len(head)
        - _visible_len(tail)
        - _visible_len(_full_view_line(url, ""))
        - NOTE_CHARS
        - 16
    )
    preview = arguments_preview(approval.arguments, budget=room, size=utf16_len)
    shown = _fit(preview.text, room)  # a net only: the preview keeps within `room`
    link = _full_view_line(url, preview.note)
    return f"{head}\nArguments:\n<pre>{html.escape(shown, quote=False)}</pre>\n{link}\n{tail}"


def _keyboard(approval: ToolApproval) -> dict:
    data = f"tool:{approval.pk}:{approval.nonce}"
    rows = [
        [
            {"text": "✅ Approve", "callback_data": f"{data}:a"},
            {"text": "✖️ Decline", "callback_data": f"{data}:d"},
        ],
        [{"text": "♾ Always allow here", "callback_data": f"{data}:w"}],
    ]
    url = full_view_url(approval)
    if is_public(url):  # Telegram refuses a button to a loopback address
        rows.append([{"text": "🔎 All arguments", "url": url}])
    return {"inline_keyboard": rows}


def _decider_name(approval: ToolApproval) -> str:
    return _text(approval_card(approval)["decided_by"], NAME_CHARS) or "a decider"


def outcome_line(approval: ToolApproval) -> str:
    """What a decided card says: approved or declined by whom, no decision in time, void."""
    template = OUTCOMES.get(approval.status, "")
    line = template.format(who=_decider_name(approval))
    if approval.status == ToolApproval.Status.APPROVED and approval.always:
        line += " The tool is always allowed in this chat from now on."
    return line


# --- who gets it ---------------------------------------------------------------------------


def decider_actors(chat: Chat) -> list[Actor]:
    """Telegram accounts linked to an active person who may decide calls in `chat`."""
    people = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(is_staff=True) | Q(is_superuser=True) | Q(chat_memberships__chat=chat))
        .distinct()
    )
    deciders = [person.pk for person in people if may_decide(chat, person)]
    actors = Actor.objects.filter(channel=Channel.TELEGRAM, namespace="", person_id__in=deciders)
    return list(actors.order_by("id"))


def _private_chat_id(actor: Actor) -> int | None:
    try:
        chat_id = int(actor.external_id)  # a user's private chat id is their user id
    except ValueError:
        return None
    return chat_id if chat_id > 0 else None


def _group_place(chat: Chat) -> tuple[int, int | None] | None:
    """The Telegram group (and topic) the call's chat is, or None for any other chat."""
    if chat.channel != Channel.TELEGRAM or chat.kind not in GROUP_KINDS:
        return None
    try:
        return int(chat.external_id), int(chat.thread_id) if chat.thread_id else None
    except ValueError:
        return None


def _group_reply_to(approval: ToolApproval) -> int | None:
    """The group message the waiting turn answers, so the notice sits under it."""
    return (
        OutboundMessage.objects.filter(turn_id=approval.turn_id)
        .values_list("reply_to_message_id", flat=True)
        .first()
    )


# --- sending and updating cards ------------------------------------------------------------


def tool_approval_notify(*, approval: ToolApproval) -> list[OutboundMessage]:
    """Queue the card with its buttons to the private chat of every decider who linked
    Telegram, and a notice without arguments to the call's chat when it is a Telegram group;
    nothing for a card that is no longer pending."""
    approval = (
        ToolApproval.objects.select_related("chat")
        .filter(pk=approval.pk, status=ToolApproval.Status.PENDING)
        .first()
    )
    if approval is None:
        return []
    rows = []
    with transaction.atomic():
        text, keyboard = card_text(approval), _keyboard(approval)
        for actor in decider_actors(approval.chat):
            chat_id = _private_chat_id(actor)
            if chat_id is None:
                continue
            rows.append(
                outbox_send(
                    telegram_chat_id=chat_id,
                    text=text,
                    reply_markup=keyboard,
                    extra={"tool_approval_id": approval.pk},
                    about=approval.chat,
                )
            )
        place = _group_place(approval.chat)
        if place is not None:
            who = _text(approval.requested_by_name, NAME_CHARS) or "someone"
            notice = (
                f"⏳ A call of <code>{_text(approval.function, NAME_CHARS)}</code> (asked by "
                f"{who}) waits for a decider: the chat's owners and admins decide it in their "
                "private chat with me or on the dashboard."
            )
            rows.append(
                outbox_send(
                    telegram_chat_id=place[0],
                    thread_id=place[1],
                    reply_to_message_id=_group_reply_to(approval),
                    text=notice,
                    extra={"tool_approval_notice": approval.pk},
                    about=approval.chat,
                )
            )
    return rows


def tool_approval_update(*, approval: ToolApproval) -> list[OutboundMessage]:
    """Show the outcome on every copy of the card (without buttons) and tell the group who
    decided; nothing while the card is still pending."""
    approval = (
        ToolApproval.objects.select_related("chat", "decided_by").filter(pk=approval.pk).first()
    )
    if approval is None or approval.status == ToolApproval.Status.PENDING:
        return []
    text = card_text(approval, outcome=outcome_line(approval))
    rows = []
    with transaction.atomic():
        # Through the chat's index: the outbox is never pruned, its payloads are not indexed.
        sent = OutboundMessage.objects.filter(chat=approval.chat, kind=OutboundMessage.Kind.SEND)
        cards = sent.select_for_update().filter(payload__tool_approval_id=approval.pk)
        for card in cards:
            if card.message_ids:
                rows.append(
                    OutboundMessage.objects.create(
                        kind=OutboundMessage.Kind.EDIT,
                        telegram_chat_id=card.telegram_chat_id,
                        payload={
                            "message_id": card.message_ids[0],
                            "text": text,
                            "parse_mode": "HTML",
                            "tool_approval_outcome": approval.pk,
                        },
                    )
                )
            elif card.status == OutboundMessage.Status.PENDING:
                # Not sent yet: it goes out decided. (A copy being sent this very moment keeps
                # its buttons; a press on it is stale and edits it then.)
                payload = {k: v for k, v in card.payload.items() if k != "reply_markup"}
                OutboundMessage.objects.filter(pk=card.pk, message_ids=[]).update(
                    payload={**payload, "text": text}
                )
        place = _group_place(approval.chat)
        notified = sent.filter(payload__tool_approval_notice=approval.pk)
        if place is not None and notified.exists():
            tool = f"<code>{_text(approval.function, NAME_CHARS)}</code>"
            line = GROUP_OUTCOMES.get(approval.status, "{tool}: {who}")
            rows.append(
                outbox_send(
                    telegram_chat_id=place[0],
                    thread_id=place[1],
                    reply_to_message_id=_group_reply_to(approval),
                    text=line.format(tool=tool, who=_decider_name(approval)),
                    extra={"tool_approval_decided": approval.pk},
                    about=approval.chat,
                )
            )
    return rows


def on_approval_requested(sender=None, approval=None, **kwargs) -> None:
    """Receiver of `toolservers.approvals.approval_requested` (sent after commit)."""
    if approval is None:
        return
    from django.conf import settings

    if not settings.TELEGRAM_BOT_TOKEN:
        return
    try:
        tool_approval_notify(approval=approval)
    except Exception:  # noqa: BLE001 - a notification must never break the approval
        logger.exception("could not queue Telegram cards for tool approval %s", approval.pk)


def on_approval_decided(sender=None, approval=None, **kwargs) -> None:
    """Receiver of `toolservers.approvals.approval_decided` (sent after commit)."""
    if approval is None:
        return
    from django.conf import settings

    if not settings.TELEGRAM_BOT_TOKEN:
        return
    try:
        tool_approval_update(approval=approval)
    except Exception:  # noqa: BLE001 - a notification must never break the decision
        logger.exception("could not update Telegram cards of tool approval %s", approval.pk)


# --- a press -------------------------------------------------------------------------------


def callback_query_apply(query: CallbackQuery, identity: BotIdentity):
    """Apply a press of a tool-call button: a decision by the presser's linked person, or a
    polite answer that decides nothing (forged, stale, not a decider, not in private)."""
    match = CALLBACK_RE.match(query.data or "")
    if match is None:
        text = "This card is not valid: nothing was decided."
        return UpdateOutcome("tools:forged", outbound=[callback_answer(query, text)])
    if not in_own_private_chat(query):
        text = "Tool calls are decided in your private chat with me."
        return UpdateOutcome("tools:not private", outbound=[callback_answer(query, text)])
    presser = query.from_user
    actor = actor_get_or_create(
        channel=Channel.TELEGRAM, user_id=presser.id, display_name=display_name(presser)
    )
    # Read the person as stored now: a decider deactivated a moment ago decides nothing.
    person = get_user_model().objects.filter(pk=actor.person_id).first()
    if person is None:
        text = "Link this Telegram account to your dashboard login first (/link CODE)."
        return UpdateOutcome("tools:not linked", outbound=[callback_answer(query, text)])
    action = match.group(3)
    result = approval_decide(
        approval_id=int(match.group(1)),
        nonce=match.group(2),
        person=person,
        approve=action in ("a", "w"),
        always=action == "w",
        via="telegram",
    )
    outbound = [callback_answer(query, result.message[:190])]
    if result.outcome is Decision.STALE and result.approval is not None:
        # Its copies were edited when it was decided; this one may have gone out just then.
        approval = result.approval
        outbound += callback_edit(query, card_text(approval, outcome=outcome_line(approval)))
    # A decision edits every copy of the card once committed (`on_approval_decided`).
    return UpdateOutcome(f"tools:{result.outcome.value}", outbound=outbound)
