"""A chat admin's decision on a schedule the agent proposed, from the Approvals page.

htmx requests get the item's outcome line (`"schedules/approvals.html#outcome"`) with the
navigation badge out of band, 409 when nothing was decided; without JavaScript the form posts
and redirects back to the Approvals page with a message. Anyone who may not decide gets 404
whether or not the schedule exists, and nothing changes.
"""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from schedules.proposals import (
    ApprovalInvalid,
    ApprovalNotAllowed,
    ApprovalStale,
    schedule_approval_decide,
)


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])


@login_required
@require_POST
def schedule_proposal_decide(request: HttpRequest, schedule_id: int) -> HttpResponse:
    """Approve or reject one pending schedule as a chat admin of its chat."""
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse("Choose approve or reject.", status=400)
    decision = form.cleaned_data["decision"]
    try:
        schedule_approval_decide(schedule_id=schedule_id, decision=decision, person=request.user)
    except ApprovalNotAllowed:
        raise Http404("No such schedule waiting for you.") from None
    except (ApprovalStale, ApprovalInvalid) as exc:
        return _answer(request, schedule_id, str(exc), kind="failed", refused=True)
    verb = "approved" if decision == "approve" else "rejected"
    return _answer(request, schedule_id, f"Schedule #{schedule_id} {verb}.", kind=verb)


def _answer(request, schedule_id: int, text: str, *, kind: str, refused: bool = False):
    if not request.htmx:
        level = messages.WARNING if refused else messages.SUCCESS
        messages.add_message(request, level, f"Schedule #{schedule_id}: {text}")
        return redirect("memory_approvals")
    context = {"schedule_id": schedule_id, "text": text, "kind": kind}
    return render(
        request, "schedules/approvals.html#outcome", context, status=409 if refused else 200
    )
