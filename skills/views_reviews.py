"""Skill reviewers' decisions from the Approvals page.

A decision names the version the page compared the proposal with (`shown_version`: its base
version, empty for a new skill), so a proposal whose skill moved on is never applied unseen.
htmx requests get the item's outcome line (`"skills/approvals.html#outcome"`) with the
navigation badge out of band, 409 when nothing was applied; without JavaScript the form
posts and redirects back to the Approvals page with a message. Only skill reviewers decide:
for anyone else a proposal answers 404 whether or not it exists, and nothing changes.
"""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from skills import policy
from skills.approvals import (
    SHOWN_ANOTHER_VERSION,
    Outcome,
    outcome_already,
    outcome_approved,
    outcome_blocked,
    outcome_rejected,
    outcome_superseded,
    proposal_decided,
    proposal_item,
)
from skills.forms import MAX_NUMBER
from skills.models import SkillProposal, Via
from skills.reviews import skill_proposal_decide
from skills.selectors import skill_proposals_reviewable
from skills.services import SkillConflict, SkillInvalid, SkillNotAllowed, SkillStale
from skills.views import raw_text_response

Status = SkillProposal.Status


class SkillDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    # The base version the page showed; empty for a new skill.
    shown_version = forms.IntegerField(required=False, min_value=1, max_value=MAX_NUMBER)


@login_required
@require_POST
def proposal_decide(request: HttpRequest, proposal_id: int) -> HttpResponse:
    """Approve or reject one pending skill proposal exactly as shown, as a skill reviewer;
    the decision is audited with via="dashboard". Anyone else: 404, nothing changes."""
    if not policy.may_review(request.user):
        raise Http404("No such proposal.")
    form = SkillDecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse("Choose approve or reject (reload the page first).", status=400)
    try:
        proposal = skill_proposal_decide(
            proposal_id=proposal_id,
            decision=form.cleaned_data["decision"],
            shown_version=form.cleaned_data["shown_version"],
            person=request.user,
            via=Via.DASHBOARD,
        )
    except SkillNotAllowed:
        raise Http404("No such proposal.") from None
    except (SkillConflict, SkillInvalid) as exc:
        proposal = proposal_decided(request.user, proposal_id)
        if proposal is None:
            raise Http404("No such proposal.") from None
        if isinstance(exc, SkillInvalid):
            outcome = outcome_blocked(proposal_id)
        elif isinstance(exc, SkillStale) and proposal.status == Status.PENDING:
            return _shown_another_version(request, proposal)
        elif isinstance(exc, SkillStale):
            outcome = outcome_superseded(proposal.slug)
        else:
            outcome = outcome_already(proposal)
    else:
        approved = proposal.status == Status.APPROVED
        outcome = outcome_approved(proposal) if approved else outcome_rejected(proposal)
    return _answer(request, proposal, outcome)


def _answer(request, proposal: SkillProposal, outcome: Outcome) -> HttpResponse:
    if not request.htmx:
        level = messages.WARNING if outcome.refused else messages.SUCCESS
        messages.add_message(request, level, outcome.line(proposal.slug))
        return redirect("memory_approvals")
    context = {
        "proposal_id": proposal.pk,
        "slug": proposal.slug,
        "outcome": outcome,
    }
    return render(
        request, "skills/approvals.html#outcome", context, status=409 if outcome.refused else 200
    )


def _shown_another_version(request, proposal: SkillProposal) -> HttpResponse:
    """The page showed another base than the proposal's: nothing was decided; the item
    again as it is, with the reason on top."""
    notice = SHOWN_ANOTHER_VERSION
    if not request.htmx:
        messages.warning(request, f"{proposal.slug}: {notice}")
        return redirect("memory_approvals")
    item = proposal_item(request.user, proposal.pk, notice=notice)
    if item is None:  # decided meanwhile
        proposal = proposal_decided(request.user, proposal.pk) or proposal
        return _answer(request, proposal, outcome_already(proposal))
    return render(request, "skills/approvals.html#item", {"item": item, "badge": True}, status=409)


@login_required
@require_GET
def proposal_raw(request: HttpRequest, proposal_id: int) -> HttpResponse:
    """The proposed text of one file of a pending proposal (`?path=`, SKILL.md by default) as
    plain text, exactly as stored: where the Approvals page's diff was too large to show.
    Skill reviewers only; for anyone else it answers 404 whether or not it exists."""
    proposal = skill_proposals_reviewable(request.user).filter(pk=proposal_id).first()
    if proposal is None:
        raise Http404("No such skill change waits for you.")
    return raw_text_response(request, proposal, missing="This change has no file")
