"""What skill reviewers do on the skill page: roll back, pin / unpin, archive / restore, and
promote a personal skill to the team.

POST only, CSRF on, and only for skill reviewers (`skills.policy.may_review`): anyone else
gets 403 and nothing changes (the services in `skills.reviews` refuse them too). A rollback
names the version the page showed as current (`shown_version`): if the skill moved on, it
answers 409 with the reason and the page as it is now. With htmx the affected part is
swapped (`"skills/skill.html#page"` after a rollback, `#head` and the audit trail after a
pin or a status change) with a status line; without JavaScript a success redirects back with
a Django message and a refusal shows the page with the reason (409).
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import replace_url

from skills import policy
from skills.forms import PinForm, PromoteForm, RollbackForm, StatusForm
from skills.models import Skill, Via
from skills.reviews import skill_pin, skill_promote, skill_rollback, skill_set_status
from skills.services import SkillConflict, SkillInvalid, SkillNotAllowed, SkillStale
from skills.views import shown_version, skill_context, skill_or_404

REVIEWERS_ONLY = "Only skill reviewers (staff or the skill reviewers group) may do this."
RELOAD = "This form is out of date or incomplete: reload the page and try again."


def _forbidden() -> HttpResponse:
    return HttpResponseForbidden(REVIEWERS_ONLY, content_type="text/plain; charset=utf-8")


def _page_url(skill: Skill, view: int | None = None) -> str:
    url = reverse("skill_page", args=[skill.slug])
    if view and view != skill.current_version.number:
        url += f"?version={view}"
    return url


def _fresh(slug: str, person) -> Skill:
    return skill_or_404(slug, person)  # as it is after the action (or after someone else's)


def _shown(skill: Skill, view: int | None):
    """The version the page was showing, if it still exists; else the current one."""
    if view is None:
        return skill.current_version
    try:
        return shown_version(skill, view)
    except Http404:
        return skill.current_version


@login_required
@require_POST
def skill_rollback_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Make version `to_version` current again (as a new version), bound to the version the
    page showed as current; the page then shows the new current version."""
    skill = skill_or_404(slug, request.user)
    if not policy.may_review(request.user):
        return _forbidden()
    form = RollbackForm(request.POST)
    if not form.is_valid():
        return HttpResponse(RELOAD, status=400, content_type="text/plain; charset=utf-8")
    to_number = form.cleaned_data["to_version"]
    shown = form.cleaned_data["shown_version"]
    try:
        version = skill_rollback(
            name=skill.slug,
            to_number=to_number,
            shown_version=shown,
            person=request.user,
            via=Via.DASHBOARD,
        )
    except SkillNotAllowed:
        return _forbidden()
    except SkillStale:
        skill = _fresh(slug, request.user)
        notice = (
            f"Not rolled back: {skill.slug} changed after you loaded this page (you saw "
            f"version {shown}, it is at version {skill.current_version.number} now). Here it "
            "is as it is now: check it, then decide again."
        )
        return _refused(request, skill, notice)
    except SkillInvalid:
        notice = (
            f"Not rolled back: version {to_number} is blocked by today's content scan. "
            "The audit trail below lists what was found; nothing changed."
        )
        return _refused(request, _fresh(slug, request.user), notice)
    except SkillConflict as exc:
        return _refused(request, _fresh(slug, request.user), f"Not rolled back: {exc}.")
    done = (
        f"Rolled back to version {to_number}: version {version.number} has its content "
        "and is current now."
    )
    skill = _fresh(slug, request.user)
    if not request.htmx:
        messages.success(request, done)
        return redirect(_page_url(skill))
    context = skill_context(request, skill, notice=done)
    response = render(request, "skills/skill.html#page", context)
    return replace_url(response, _page_url(skill))


def _refused(request: HttpRequest, skill: Skill, notice: str) -> HttpResponse:
    """409: the page as it is now (the current version) with the reason on top."""
    context = skill_context(request, skill, notice=notice, failed=True)
    if request.htmx:
        response = render(request, "skills/skill.html#page", context, status=409)
        return replace_url(response, _page_url(skill))
    return render(request, "skills/skill.html", context, status=409)


# What a pin or a status change did, by the state asked for.
PINNED = {
    True: "Pinned: listed first in every chat's skills index.",
    False: "Unpinned: listed with the others again.",
}
ARCHIVED = {
    True: "Archived: out of every chat's skills index; restore it to bring it back.",
    False: "Restored: back in every chat's skills index.",
}


def _switch(
    request: HttpRequest, slug: str, form_class, field: str, service, done: dict[bool, str]
):
    """Pin / unpin or archive / restore: the form's `field` is the wanted state, passed to
    `service` under the same name; `done[value]` says what happened."""
    skill = skill_or_404(slug, request.user)
    if not policy.may_review(request.user):
        return _forbidden()
    form = form_class(request.POST)
    if not form.is_valid():
        return HttpResponse(RELOAD, status=400, content_type="text/plain; charset=utf-8")
    value = form.cleaned_data[field]
    view = form.cleaned_data.get("view")
    try:
        service(name=skill.slug, person=request.user, via=Via.DASHBOARD, **{field: value})
    except SkillNotAllowed:
        return _forbidden()
    except SkillConflict as exc:  # the skill is gone
        return HttpResponse(f"{exc}.", status=409, content_type="text/plain; charset=utf-8")
    skill = _fresh(slug, request.user)
    if not request.htmx:
        messages.success(request, done[value])
        return redirect(_page_url(skill, view))
    context = skill_context(request, skill, shown=_shown(skill, view), notice=done[value])
    return render(request, "skills/skill.html#head_and_events", context)


@login_required
@require_POST
def skill_pin_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Pin a skill (listed first in every chat's skills index) or unpin it."""
    return _switch(request, slug, PinForm, "pinned", skill_pin, PINNED)


@login_required
@require_POST
def skill_status_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Archive a skill (out of every chat's index, versions kept) or restore it."""
    return _switch(request, slug, StatusForm, "archived", skill_set_status, ARCHIVED)


@login_required
@require_POST
def skill_promote_view(request: HttpRequest, slug: str) -> HttpResponse:
    """Make a personal skill a team skill, bound to the version the page showed as current:
    if it changed since, or today's scanner blocks it, nothing changes and the page says why
    (409). Anyone but a skill reviewer gets 403 (404 if they may not even see the skill)."""
    skill = skill_or_404(slug, request.user)
    if not policy.may_review(request.user):
        return _forbidden()
    form = PromoteForm(request.POST)
    if not form.is_valid():
        return HttpResponse(RELOAD, status=400, content_type="text/plain; charset=utf-8")
    shown = form.cleaned_data["shown_version"]
    view = form.cleaned_data.get("view")
    try:
        skill_promote(name=skill.slug, shown_version=shown, person=request.user)
    except SkillNotAllowed:
        return _forbidden()
    except SkillStale:
        skill = _fresh(slug, request.user)
        notice = (
            f"Not promoted: {skill.slug} changed after you loaded this page (you saw version "
            f"{shown}, it is at version {skill.current_version.number} now). Read it again, "
            "then decide."
        )
        return _refused(request, skill, notice)
    except SkillInvalid:
        notice = (
            "Not promoted: today's content scan blocks this skill. The audit trail below lists "
            "what was found; nothing changed."
        )
        return _refused(request, _fresh(slug, request.user), notice)
    except SkillConflict as exc:
        return _refused(request, _fresh(slug, request.user), f"Not promoted: {exc}.")
    done = "Promoted: a team skill now, in every chat's skills index."
    skill = _fresh(slug, request.user)
    if not request.htmx:
        messages.success(request, done)
        return redirect(_page_url(skill, view))
    context = skill_context(request, skill, shown=_shown(skill, view), notice=done)
    return render(request, "skills/skill.html#head_and_events", context)
