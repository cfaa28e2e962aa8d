"""Approval cards on a chat's page: the open cards, one card, and a decider's press.

Readers of the chat (`toolservers.policy.may_read`: its active members and staff, signed in
to the dashboard; never an API token) see its cards and the full view of a card's arguments;
anyone else, and any card id that is not this chat's, gets the 404 of a missing chat, so
another chat's cards never show. A press carries the card's nonce in the form; who decides
is the session's person, never a form field. `approval_decide` checks again whether that
person may decide (403), whether the card is still open (409) and whether it is genuine
(404); htmx gets the card as it now is, or the refusal in the card's error line.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import reswap, retarget

from chats.models import Chat
from toolservers.approval_arguments import arguments_full
from toolservers.approvals import (
    Decision,
    approval_card,
    approval_decide,
    approval_readable,
    pending_approvals,
)
from toolservers.models import ToolApproval
from toolservers.policy import may_decide, may_read

TEMPLATE = "toolservers/approval_card.html"
CHOICES = {"approve": (True, False), "decline": (False, False), "always": (True, True)}
STATUS = {Decision.FORBIDDEN: 403, Decision.STALE: 409, Decision.FORGED: 404}


def _readable_chat_or_404(request: HttpRequest, chat_key: str) -> Chat:
    """Unknown keys and chats the person may not read look the same: existence never leaks."""
    chat = Chat.objects.filter(chat_key=chat_key).first()
    if chat is None or not may_read(chat, request.user):
        raise Http404("No such chat.")
    return chat


def _approval_of(chat: Chat, approval_id: int) -> ToolApproval:
    approval = (
        ToolApproval.objects.select_related("decided_by").filter(chat=chat, pk=approval_id).first()
    )
    if approval is None:
        raise Http404("No such card.")
    return approval


def _card_context(request: HttpRequest, chat: Chat, approval: ToolApproval, **extra) -> dict:
    card = approval_card(approval) | {"can_decide": may_decide(chat, request.user)}
    return {"chat": chat, "card": card, **extra}


@login_required
@require_GET
def chat_approvals(request: HttpRequest, chat_key: str) -> HttpResponse:
    """The chat's open cards, oldest first (the chat page loads them into its card list)."""
    chat = _readable_chat_or_404(request, chat_key)
    cards = pending_approvals(chat=chat, person=request.user)
    return render(request, f"{TEMPLATE}#list", {"chat": chat, "cards": cards})


@login_required
@require_GET
def approval_card_view(request: HttpRequest, chat_key: str, approval_id: int) -> HttpResponse:
    """One card of the chat as it is now, for the page's live updates: open (with buttons
    for deciders) or decided (who decided, or why nobody did)."""
    chat = _readable_chat_or_404(request, chat_key)
    approval = _approval_of(chat, approval_id)
    return render(request, f"{TEMPLATE}#card", _card_context(request, chat, approval))


@login_required
@require_GET
def approval_arguments(request: HttpRequest, chat_key: str, approval_id: int) -> HttpResponse:
    """Every argument of one call of the chat, whole (hidden characters marked), for its
    readers; its deciders decide there while it is open."""
    approval = approval_readable(chat_key=chat_key, approval_id=approval_id, person=request.user)
    if approval is None:
        raise Http404("No such chat.")
    full = arguments_full(approval.arguments)
    context = _card_context(request, approval.chat, approval, full=full)
    return render(request, "toolservers/approval_arguments.html", context)


@login_required
@require_POST
def approval_decide_view(request: HttpRequest, chat_key: str, approval_id: int) -> HttpResponse:
    """A press of Approve, Decline or "Always allow this tool here" by the signed-in person:
    the card as decided (200), or nothing decided with the reason (403 not a decider, 409
    no longer open, 404 not a genuine card of a chat they read; 400 no such choice)."""
    chat = _readable_chat_or_404(request, chat_key)
    _approval_of(chat, approval_id)  # another chat's card is a 404, never decided here
    choice = CHOICES.get(request.POST.get("decision", ""))
    if choice is None:
        return HttpResponse("decision must be approve, decline or always", status=400)
    approve, always = choice
    result = approval_decide(
        approval_id=approval_id,
        nonce=request.POST.get("nonce", ""),
        person=request.user,
        approve=approve,
        always=always,
        via="dashboard",
    )
    if result.outcome is Decision.DECIDED and not request.htmx:
        return redirect("chat_page", chat_key=chat.chat_key)
    status = STATUS.get(result.outcome, 200)
    if not request.htmx:
        return HttpResponse(result.message, status=status, content_type="text/plain")
    if result.outcome in (Decision.DECIDED, Decision.STALE):
        # The card as it now is, with what (not) happened said in it.
        approval = _approval_of(chat, approval_id)
        notice = "" if result.outcome is Decision.DECIDED else result.message
        context = _card_context(request, chat, approval, error=notice)
        return render(request, f"{TEMPLATE}#card", context, status=status)
    response = render(request, f"{TEMPLATE}#error", {"error": result.message}, status=status)
    return reswap(retarget(response, f"#approval-{approval_id} .approval-error"), "outerHTML")
