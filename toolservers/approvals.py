"""Approval of risky tool calls: the gate that makes a turn wait, the card, the decision.

A call whose policy in its chat is `ask` makes its turn wait (`chats.agent.turns`): the
gate returns `Gate.WAIT` whose `hold` stores a `ToolApproval` in the very transaction that
moves the turn to `waiting`, so nobody can decide a call whose turn is still running.
The card is bound to that one call: its turn, its step and the model's call id
(`call_key`), its exact arguments, and a random `nonce` that every button carries.

After commit the chat hears `approval.requested` (the dashboard shows the card, the
terminal prompts y/N) and the `approval_requested` signal tells other apps (the Telegram
bridge sends the card to each decider's private chat with the bot).

Who decides: the chat's deciders (`toolservers.policy.may_decide`: the person alone in their
own chat; in shared chats its owners and admins; staff). A decision moves the turn back to
`queued` (`turn_resume`); the gate, asked again about the same call, then runs it (the
audit row says who approved) or refuses it. A press on a stale card (decided, expired, void
because its turn ended) or a forged one (an unknown id, a wrong nonce) decides nothing.
No decision within TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS denies the call (`approvals_expire`,
run by beat) and the model is told. "Always allow this tool here" (for deciders) also sets
the tool's policy in the chat to `allow`, audited as any toolset change.
"""

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from chats.agent import events
from chats.agent.registry import Gate, TurnContext
from chats.agent.turns import turn_resume
from chats.models import Chat, Turn
from hermes_site.scanning import reveal_hidden
from toolservers.approval_arguments import arguments_preview, full_view_path, full_view_url
from toolservers.models import ChatToolset, Policy, ToolApproval, ToolAudit, ToolCall
from toolservers.policy import may_decide, may_read
from toolservers.selectors import ActiveTool
from toolservers.services import tool_call_record

logger = logging.getLogger(__name__)

# Sent after commit with `approval` (a new pending card), and with `approval` decided or
# expired (its `status` says which): the Telegram bridge sends and updates its cards.
approval_requested = Signal()
approval_decided = Signal()

VIA = ("dashboard", "telegram", "terminal", "expiry")


class Decision(Enum):
    DECIDED = "decided"
    FORBIDDEN = "forbidden"  # not a decider of this chat
    STALE = "stale"  # already decided, expired or void
    FORGED = "forged"  # no such card, or the nonce does not match


@dataclass(frozen=True)
class DecisionResult:
    outcome: Decision
    approval: ToolApproval | None = None

    @property
    def message(self) -> str:
        if self.outcome is Decision.DECIDED:
            verb = (
                "approved" if self.approval.status == ToolApproval.Status.APPROVED else "declined"
            )
            return f"Call {verb}: {self.approval.function}."
        if self.outcome is Decision.FORBIDDEN:
            return "Only this chat's owners and admins (or staff) can decide this call."
        if self.outcome is Decision.STALE:
            state = self.approval.get_status_display().lower() if self.approval else "gone"
            return f"This card is no longer open ({state}): nothing was decided."
        return "This card is not valid: nothing was decided."


# --- the gate ------------------------------------------------------------------------------


def tool_gate(item: ActiveTool, function: str):
    """The gate of one chat tool: its policy there, and for `ask` the approval of the call."""

    def gate(context: TurnContext, call_key: str, arguments: dict) -> Gate:
        if item.policy == Policy.DENY:
            message = f"refused: the tool {item.tool.name} is denied in this chat"
            _refusal(context, item, arguments, ToolCall.Decision.DENIED, message)
            return Gate(Gate.REFUSE, message=f"Error: {message}")
        if item.policy != Policy.ASK:
            return Gate(Gate.RUN)
        if context.turn is None:
            message = f"refused: the tool {item.tool.name} needs a decider's approval here"
            _refusal(context, item, arguments, ToolCall.Decision.NEEDS_APPROVAL, message)
            return Gate(Gate.REFUSE, message=f"Error: {message}")
        approval = ToolApproval.objects.filter(turn=context.turn, call_key=call_key).first()
        if approval is None:
            return _wait_for_new(context, item, function, call_key, arguments)
        if approval.arguments != arguments:  # never: the step is stored; refuse if it were
            message = "refused: the arguments differ from those that were decided"
            _refusal(context, item, arguments, ToolCall.Decision.DENIED, message)
            return Gate(Gate.REFUSE, message=f"Error: {message}")
        status = approval.status
        if status == ToolApproval.Status.PENDING:
            return Gate(
                Gate.WAIT, card=approval_card(approval), reason=_reason(function)
            )  # e.g. enqueued again while still waiting: wait on the same card
        if status == ToolApproval.Status.APPROVED:
            return Gate(Gate.RUN, note={"approval": approval.pk, "by": approval.decided_by_id})
        who = _name(approval.decided_by) if approval.decided_by_id else ""
        if status == ToolApproval.Status.DENIED:
            message = f"refused: {who or 'a decider'} declined this call; it was not run"
            decision = ToolCall.Decision.REJECTED
        elif status == ToolApproval.Status.EXPIRED:
            minutes = settings.TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS / 60
            message = (
                f"refused: nobody decided within {minutes:g} minutes, so the call was not "
                "run. Tell the user it waited for approval; they can ask again."
            )
            decision = ToolCall.Decision.EXPIRED
        else:
            message = "refused: the approval was void; the call was not run"
            decision = ToolCall.Decision.DENIED
        _refusal(context, item, arguments, decision, message, decided_by=approval.decided_by)
        return Gate(Gate.REFUSE, message=f"Error: {message}")

    return gate


def _reason(function: str) -> str:
    return f"approval of {function}"


def _refusal(context, item, arguments, decision, message, *, decided_by=None) -> None:
    tool_call_record(
        context=context,
        server=item.server,
        tool=item.tool.name,
        arguments=arguments,
        decision=decision,
        error=message,
        decided_by=decided_by,
    )


def _wait_for_new(context, item: ActiveTool, function: str, call_key: str, arguments) -> Gate:
    card: dict = {}
    person = context.person

    def hold() -> None:
        # Runs in the transaction that moves the turn to waiting (`turn_wait`).
        approval, _ = ToolApproval.objects.get_or_create(
            turn=context.turn,
            call_key=call_key,
            defaults={
                "chat": context.chat,
                "server": item.server,
                "server_slug": item.server.slug,
                "tool": item.tool.name,
                "function": function,
                "arguments": arguments,
                "nonce": secrets.token_urlsafe(12),
                "requested_by": person,
                "requested_by_name": _requester_name(context),
                "expires_at": timezone.now()
                + timedelta(seconds=settings.TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS),
            },
        )
        card.update(approval_card(approval))
        transaction.on_commit(lambda: _announce_request(approval))

    return Gate(Gate.WAIT, hold=hold, card=card, reason=_reason(function))


def _requester_name(context: TurnContext) -> str:
    if context.actor is not None:
        return context.actor.display_name
    return _name(context.person) if context.person else ""


def _name(person) -> str:
    if person is None:
        return ""
    return person.get_full_name() or person.get_username()


def _announce_request(approval: ToolApproval) -> None:
    events.publish(approval.chat_id, "approval.requested", card=approval_card(approval))
    for receiver, result in approval_requested.send_robust(sender=ToolApproval, approval=approval):
        if isinstance(result, Exception):
            logger.error("an approval_requested receiver (%r) failed", receiver, exc_info=result)


def approval_card(approval: ToolApproval) -> dict:
    """What a card shows (JSON): the exact tool, every argument within a bounded preview (the
    cut said, `toolservers.approval_arguments`), the full view's address, who asked, until
    when."""
    preview = arguments_preview(approval.arguments)
    return {
        "id": approval.pk,
        "nonce": approval.nonce,
        "turn_id": approval.turn_id,
        "chat_id": approval.chat_id,
        # Names a server, a model or a person chose: hidden characters marked as in arguments.
        "server": reveal_hidden(approval.server_slug),
        "tool": reveal_hidden(approval.tool),
        "function": reveal_hidden(approval.function),
        "arguments": preview.text,
        "arguments_cut": preview.note,
        "arguments_url": full_view_path(approval),
        "requested_by": reveal_hidden(approval.requested_by_name),
        "status": approval.status,
        "status_text": approval.get_status_display(),
        "expires_at": approval.expires_at.isoformat(),
        "decided_by": reveal_hidden(_name(approval.decided_by)) if approval.decided_by_id else "",
        "always": approval.always,
    }


# --- deciding ------------------------------------------------------------------------------


def approval_decide(
    *,
    approval_id: int,
    nonce: str,
    person,
    approve: bool,
    always: bool = False,
    via: str = "dashboard",
    enqueue: bool = True,
) -> DecisionResult:
    """Decide a pending card on a decider's press; nothing changes on a forged, stale or
    forbidden press. An approval (or a decline) queues the turn again (enqueued after
    commit unless `enqueue` is off: the terminal runs its turns itself)."""
    now = timezone.now()
    with transaction.atomic():
        # Only the card's row is locked: PostgreSQL refuses FOR UPDATE on the nullable side
        # of the outer join that `decided_by` needs.
        approval = (
            ToolApproval.objects.select_for_update(of=("self",))
            .select_related("chat", "decided_by")
            .filter(pk=approval_id)
            .first()
        )
        if approval is None or not constant_time_compare(str(nonce), approval.nonce):
            return DecisionResult(Decision.FORGED)
        if not may_decide(approval.chat, person):
            return DecisionResult(Decision.FORBIDDEN, approval)
        if approval.status != ToolApproval.Status.PENDING:
            return DecisionResult(Decision.STALE, approval)
        if approval.expires_at <= now:
            return DecisionResult(Decision.STALE, _expire(approval, enqueue=enqueue))
        status = Turn.objects.filter(pk=approval.turn_id).values_list("status", flat=True).first()
        if status != Turn.Status.WAITING:  # stopped or superseded: the card is void
            approval.status = ToolApproval.Status.CANCELLED
            approval.save(update_fields=["status"])
            transaction.on_commit(lambda: _announce_decision(approval))  # every copy says so
            return DecisionResult(Decision.STALE, approval)
        approval.status = ToolApproval.Status.APPROVED if approve else ToolApproval.Status.DENIED
        approval.decided_by, approval.decided_at = person, now
        approval.decided_via = via
        approval.always = bool(approve and always)
        approval.save(update_fields=["status", "decided_by", "decided_at", "decided_via", "always"])
        if approval.always:
            _always_allow(approval, person, via)
        # Announced before the turn is queued again (commit hooks run in this order): the
        # notice of who decided is in the outbox before the call can run and answer.
        transaction.on_commit(lambda: _announce_decision(approval))
        turn_resume(turn_id=approval.turn_id, enqueue=enqueue)
    return DecisionResult(Decision.DECIDED, approval)


def _always_allow(approval: ToolApproval, person, via: str) -> None:
    if approval.server_id is None:
        return
    ChatToolset.objects.update_or_create(
        chat=approval.chat,
        server_id=approval.server_id,
        tool_name=approval.tool,
        defaults={
            "policy": Policy.ALLOW,
            "enabled": True,
            "set_by": person,
            "updated_at": timezone.now(),
        },
    )
    ToolAudit.objects.create(
        action="toolset.always_allow",
        person=person,
        via=via,
        server_slug=approval.server_slug,
        chat=approval.chat,
        detail={"tool": approval.tool, "approval": approval.pk},
    )


def _announce_decision(approval: ToolApproval) -> None:
    events.publish(approval.chat_id, "approval.decided", card=approval_card(approval))
    for receiver, result in approval_decided.send_robust(sender=ToolApproval, approval=approval):
        if isinstance(result, Exception):
            logger.error("an approval_decided receiver (%r) failed", receiver, exc_info=result)


def _expire(approval: ToolApproval, *, enqueue: bool = True) -> ToolApproval:
    """Within a transaction holding the card's row: no decision in time denies the call."""
    approval.status = ToolApproval.Status.EXPIRED
    approval.decided_at = timezone.now()
    approval.decided_via = "expiry"
    approval.save(update_fields=["status", "decided_at", "decided_via"])
    transaction.on_commit(lambda: _announce_decision(approval))
    turn_resume(turn_id=approval.turn_id, enqueue=enqueue)
    return approval


def approvals_expire(*, now=None, enqueue: bool = True) -> int:
    """Deny every pending call whose time ran out and queue its turn again; returns how many."""
    now = now or timezone.now()
    due = list(
        ToolApproval.objects.filter(
            status=ToolApproval.Status.PENDING, expires_at__lte=now
        ).values_list("id", flat=True)[:500]
    )
    expired = 0
    for approval_id in due:
        with transaction.atomic():
            approval = (
                ToolApproval.objects.select_for_update()
                .filter(pk=approval_id, status=ToolApproval.Status.PENDING)
                .first()
            )
            if approval is not None:
                _expire(approval, enqueue=enqueue)
                expired += 1
    return expired


def approvals_void_for_turn(*, turn: Turn) -> int:
    """The turn ended (stopped, superseded) while its calls waited: their cards are void."""
    pending = list(ToolApproval.objects.filter(turn=turn, status=ToolApproval.Status.PENDING))
    for approval in pending:
        updated = ToolApproval.objects.filter(
            pk=approval.pk, status=ToolApproval.Status.PENDING
        ).update(status=ToolApproval.Status.CANCELLED, decided_at=timezone.now())
        if updated:
            approval.status = ToolApproval.Status.CANCELLED
            _announce_decision(approval)
    return len(pending)


# --- reads ---------------------------------------------------------------------------------


def pending_approvals(*, chat: Chat, person) -> list[dict]:
    """The open cards of `chat` for someone who may read it, each with `can_decide`."""
    if not may_read(chat, person):
        return []
    can_decide = may_decide(chat, person)
    rows = ToolApproval.objects.filter(chat=chat, status=ToolApproval.Status.PENDING)
    rows = rows.select_related("chat")
    return [{**approval_card(row), "can_decide": can_decide} for row in rows.order_by("created_at")]


def approval_readable(*, chat_key: str, approval_id: int, person) -> ToolApproval | None:
    """The card `approval_id` of the chat `chat_key` for one of that chat's readers (its
    active members and staff, `may_read`); None for anyone else, for an unknown chat and for
    another chat's card, alike."""
    approval = (
        ToolApproval.objects.select_related("chat", "decided_by")
        .filter(pk=approval_id, chat__chat_key=chat_key)
        .first()
    )
    if approval is None or not may_read(approval.chat, person):
        return None
    return approval


class TerminalApprovals:
    """The terminal's view of approval cards (`chats.agent.waiting`)."""

    def pending_card(self, turn) -> ToolApproval | None:
        return (
            ToolApproval.objects.filter(turn=turn, status=ToolApproval.Status.PENDING)
            .order_by("created_at")
            .first()
        )

    def describe(self, card: ToolApproval) -> str:
        shown = approval_card(card)
        cut = shown["arguments_cut"]
        link = f"{cut} — see all: " if cut else "Full view: "
        return (
            f"\nApproval needed: {shown['function']} (server {shown['server']}, tool "
            f"{shown['tool']}), asked by {shown['requested_by'] or 'someone'}, open until "
            f"{card.expires_at:%H:%M:%S %Z}. Arguments:\n{shown['arguments']}\n"
            f"{link}{full_view_url(card)}"
        )

    def may_decide(self, chat, person) -> bool:
        return may_decide(chat, person)

    def decide(self, card: ToolApproval, person, *, approve: bool, always: bool) -> str:
        result = approval_decide(
            approval_id=card.pk,
            nonce=card.nonce,
            person=person,
            approve=approve,
            always=always,
            via="terminal",
            enqueue=False,
        )
        return result.message


terminal_approvals = TerminalApprovals()
