""" "What the agent learned here": one chat's review counters, its learning settings and the
background reviews that ran in it, with what each proposed.

Readers of the chat see the page; anyone else gets the 404 of a missing chat. Its owners and
admins and active staff also get the settings form (`#settings` partial for htmx, a redirect
without JavaScript). A proposal's text is shown only through memory's rules
(`learning.selectors.memory_proposals_shown`), never because a review made it; a tool call's
arguments and result, and the outcome, only to who may read what they proposed
(`learning.selectors.review_steps_shown`).
"""

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from chats.models import Chat
from chats.selectors import chat_for_person
from learning.forms import ChatLearningSettingsForm
from learning.models import ChatLearning, Review
from learning.selectors import (
    ShownReview,
    chat_learning_for_person,
    chat_learning_may_change,
    memory_proposals_shown,
    review_steps_shown,
    reviews_with_proposals_for_chat,
    skill_proposals_decidable_by,
)
from learning.services import (
    ChatLearningNotAllowed,
    IntervalTooShort,
    chat_learning_settings_update,
)

PAGE_SIZE = 25
# Arguments are stored whole; the page shows their start (results are already cut).
ARGUMENTS_CHARS = 2000
TEMPLATE = "learning/chat_learning.html"


def _chat_or_404(request: HttpRequest, chat_key: str) -> Chat:
    """Outsiders and unknown keys get the same 404: a chat's existence never leaks."""
    chat = chat_for_person(request.user, chat_key)
    if chat is None:
        raise Http404("No such chat.")
    return chat


def _settings_context(request: HttpRequest, chat: Chat, form=None) -> dict:
    learning = chat_learning_for_person(request.user, chat) or ChatLearning(chat=chat)
    can_change = chat_learning_may_change(request.user, chat)
    if can_change and form is None:
        form = ChatLearningSettingsForm(
            initial={
                "memory_interval": learning.memory_interval,
                "skill_interval": learning.skill_interval,
                "review_notice": learning.review_notice,
            }
        )
    return {
        "chat": chat,
        "learning": learning,
        "can_change": can_change,
        "form": form if can_change else None,
        "site_memory_interval": settings.LEARNING_MEMORY_REVIEW_INTERVAL,
        "site_skill_interval": settings.LEARNING_SKILL_REVIEW_INTERVAL,
    }


def _skill_url(slug: str) -> str:
    """/skills/<slug>/ when the skill pages are mounted, else "" (no link)."""
    try:
        return reverse("skill_page", args=[slug])
    except NoReverseMatch:
        return ""


def _arguments(raw) -> str:
    text = raw if isinstance(raw, str) else json.dumps(raw, indent=2, ensure_ascii=False)
    return text if len(text) <= ARGUMENTS_CHARS else text[:ARGUMENTS_CHARS] + "…"


def _steps(shown: ShownReview) -> list[dict]:
    return [
        {
            "tool": step.tool,
            "arguments": _arguments(step.arguments) if step.shown else "",
            "result": step.result,
            "is_error": step.is_error,
            "refused": step.refused,
            "shown": step.shown,
        }
        for step in shown.steps
    ]


def _duration(ms: int | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds} s"


def _rows(request: HttpRequest, chat: Chat, reviews: list[Review]) -> list[dict]:
    """Each review with its tool calls and proposals as this person may see them."""
    entries = [entry for review in reviews for entry in review.memory_entries.all()]
    shown = memory_proposals_shown(entries, chat=chat, person=request.user)
    steps = review_steps_shown(reviews, chat=chat, person=request.user, memory=shown)
    memory_of: dict[int, list] = {}
    for item in shown:
        memory_of.setdefault(item.entry.review_id, []).append(item)
    skill_reviewer = None
    rows = []
    for review in reviews:
        skills = []
        for proposal in review.skill_proposals.all():
            if skill_reviewer is None:  # asked once, only when a proposal is on the page
                skill_reviewer = skill_proposals_decidable_by(request.user)
            waiting = proposal.status == proposal.Status.PENDING
            skills.append(
                {
                    "proposal": proposal,
                    "url": _skill_url(proposal.skill.slug) if proposal.skill_id else "",
                    "may_decide": waiting and skill_reviewer,
                }
            )
        rows.append(
            {
                "review": review,
                # review_steps_shown answers for every review; a missing one fails loudly
                # rather than showing an outcome nobody checked.
                "steps": _steps(steps[review.pk]),
                "outcome_shown": steps[review.pk].outcome_shown,
                "duration": _duration(review.duration_ms),
                "memory": memory_of.get(review.pk, []),
                "skills": skills,
            }
        )
    return rows


def _reviews_context(request: HttpRequest, chat: Chat) -> dict:
    paginator = Paginator(reviews_with_proposals_for_chat(chat, request.user), PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    return {"chat": chat, "page": page, "rows": _rows(request, chat, list(page.object_list))}


@login_required
@require_GET
def chat_learning_page(request: HttpRequest, chat_key: str) -> HttpResponse:
    """A chat's counters, learning settings (with the form for its owners, admins and staff)
    and its reviews, newest first, 25 a page; only for the chat's readers, else 404. With
    htmx, a page link returns only the list (`#reviews`)."""
    chat = _chat_or_404(request, chat_key)
    context = _reviews_context(request, chat)
    if request.htmx and request.htmx.target == "reviews":
        response = render(request, f"{TEMPLATE}#reviews", context)
    else:
        context.update(_settings_context(request, chat))
        response = render(request, TEMPLATE, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_POST
def chat_learning_settings(request: HttpRequest, chat_key: str) -> HttpResponse:
    """Change the chat's review intervals (empty: site default, 0: off) and quiet notice, for
    its owners, admins and active staff (other readers 403, anyone else 404); a refused
    value is shown next to its field and nothing is written."""
    chat = _chat_or_404(request, chat_key)
    if not chat_learning_may_change(request.user, chat):
        raise PermissionDenied("Only the chat's owners and admins change its learning.")
    form = ChatLearningSettingsForm(request.POST)
    if form.is_valid():
        try:
            chat_learning_settings_update(chat=chat, person=request.user, **form.cleaned_data)
        except ChatLearningNotAllowed:
            raise PermissionDenied(
                "Only the chat's owners and admins change its learning."
            ) from None
        except IntervalTooShort as refusal:
            form.add_error(refusal.field, str(refusal))
        except ValueError as refusal:
            form.add_error(None, str(refusal))
    if form.is_valid():
        if not request.htmx:
            messages.success(request, "Saved the learning settings.")
            return redirect("chat_learning", chat_key=chat.chat_key)
        context = _settings_context(request, chat) | {"saved": True}
        return render(request, f"{TEMPLATE}#settings", context)
    context = _settings_context(request, chat, form)
    if request.htmx:
        return render(request, f"{TEMPLATE}#settings", context, status=400)
    context.update(_reviews_context(request, chat))
    return render(request, TEMPLATE, context, status=400)
