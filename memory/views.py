"""Memory pages of the dashboard: the Approvals page and "my memory".

The Approvals page shows memory's proposals, then every other section registered in
`chats.approvals` (skills) with that section's own template and context; each section
decides who sees what. One count of what waits (the badge's) and one pair of bulk buttons for
every section's ticked items. One template per page with named partials: htmx requests get the
item they changed (`"memory/approvals.html#proposal"`, `#outcome`, `#list`;
`"memory/mine.html#entry"`) and the navigation badge out of band; without JavaScript the
forms post and redirect back. Every decision goes through memory.services, which checks who
may decide: an entry that is not the person's to decide answers 404 whether or not it exists.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from chats.approvals import BulkInvalid, approval_sections, bulk_sections
from chats.labels import token_owner_names
from chats.models import Chat
from chats.selectors import chats_readable_by
from chats.work_sources import readable_keys, sources_shown
from memory.forms import NOTHING_SELECTED, BulkDecisionForm, DecisionForm
from memory.models import MemoryBook, MemoryEntry
from memory.reviews import memory_review
from memory.selectors import memory_conflict_reason, memory_entries_about, memory_reviewable
from memory.services import (
    ReviewConflict,
    ReviewInvalid,
    ReviewNotAllowed,
    ReviewStale,
    memory_expire_proposals,
    memory_forget,
)

DONE = {"approve": "Approved", "reject": "Rejected"}


def _source_chat(entry: MemoryEntry) -> Chat | None:
    if entry.proposal_message_id and entry.proposal_message is not None:
        return entry.proposal_message.chat
    return entry.source_chat


def _annotate(entries: list[MemoryEntry], person, chat_of=_source_chat) -> list[MemoryEntry]:
    """Attach where each entry came from and whether the person may open that chat: a chat
    they are not in stays unnamed (its title is not theirs to read)."""
    chats = {entry.pk: chat_of(entry) for entry in entries}
    ids = {chat.pk for chat in chats.values() if chat is not None}
    ids |= {source.get("chat_id") for entry in entries for source in entry.sources or []}
    readable = set(chats_readable_by(person).filter(pk__in=ids).values_list("pk", flat=True))
    # Knowledge collections it drew on: named for their readers only.
    keys = readable_keys(person, [s for entry in entries for s in entry.sources or []])
    for entry in entries:
        chat = chats[entry.pk]
        entry.where = chat
        entry.where_readable = chat is not None and chat.pk in readable
        # The files it drew on: linked (readers-only downloads) for a reader of their chat.
        entry.files = sources_shown(entry.sources, readable, keys)
    return entries


def _reviewable(person) -> list[MemoryEntry]:
    """What `person` may decide, annotated; a change a background review proposed says so
    ("proposed by the review after turn N", its review read in the same query)."""
    entries = list(
        memory_reviewable(person).select_related(
            "author_person", "review", "proposed_by_person", "proposed_by_actor__person"
        )
    )
    owners = token_owner_names(entry.proposed_by_actor for entry in entries)
    for entry in entries:
        entry.origin = entry.review.origin_label if entry.review_id else ""
        entry._token_owners = owners  # proposer_label names API users by their token's owner
    return _annotate(entries, person)


def _groups(entries: list[MemoryEntry]) -> list[tuple[MemoryBook, list[MemoryEntry]]]:
    groups: dict[int, tuple[MemoryBook, list[MemoryEntry]]] = {}
    for entry in entries:
        groups.setdefault(entry.book_id, (entry.book, []))[1].append(entry)
    return list(groups.values())


def _other_sections(request) -> list[str]:
    """The registered sections this page renders after memory's list (those with a template),
    each rendered by its own template with its own context for this person."""
    return [
        render_to_string(
            section.template,
            section.context(request.user) if section.context else {},
            request=request,
        )
        for section in approval_sections()
        if section.template
    ]


def _approvals_context(request, *, notice: str = "", entries=None) -> dict:
    entries = _reviewable(request.user) if entries is None else entries
    # What waits in all (the "N waiting" above the bulk buttons, and whether to show the empty
    # state) is the badge's count (`approvals_pending_count`, from the context processor,
    # counted once a render), so the page and the badge never disagree.
    return {"groups": _groups(entries), "notice": notice, "sections": _other_sections(request)}


@login_required
@require_GET
def approvals_page(request: HttpRequest) -> HttpResponse:
    """Everything this person may decide: memory proposals by book, oldest first (expired
    ones are expired first so they are never offered), then each other registered section
    (skill changes), each showing only what this person may decide."""
    memory_expire_proposals()
    response = render(request, "memory/approvals.html", _approvals_context(request))
    patch_vary_headers(response, ["HX-Request"])
    return response


def _decide_one(request, entry_id: int, decision: str, text: str | None, revision: int):
    """Returns (entry or None, outcome message, error kind or "")."""
    try:
        entry = memory_review(
            entry_id=entry_id,
            decision=decision,
            revision=revision,
            person=request.user,
            text=text,
            via="dashboard",
        )
    except ReviewNotAllowed:
        return None, "Not found.", "not_found"
    except ReviewStale as exc:
        return None, f"{exc}.", "stale"
    except ReviewConflict:
        error, message = memory_conflict_reason(entry_id)
        return None, message, error
    except ReviewInvalid as exc:
        return None, f"Not saved: {exc}.", "invalid"
    return entry, DONE[decision], ""


@login_required
@require_POST
def proposal_decide(request: HttpRequest, entry_id: int) -> HttpResponse:
    """Approve or reject one proposal as shown (its revision), `text` approving an edited
    text; the decision and any edit are audited with via="dashboard"."""
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse("Choose approve or reject (reload the page first).", status=400)
    decision = form.cleaned_data["decision"]
    text = form.cleaned_data["text"] if "text" in request.POST else None
    entry, message, error = _decide_one(
        request, entry_id, decision, text, form.cleaned_data["revision"]
    )
    if error == "not_found":
        raise Http404("No such proposal.")
    if error == "invalid":
        return _edit_refused(request, entry_id, message, request.POST.get("text", ""))
    if error == "stale" and request.htmx:
        return _changed_since_shown(request, entry_id, message)
    if not request.htmx:
        level = messages.WARNING if error else messages.SUCCESS
        outcome = message if error else f"{message}: “{entry.text}”"
        messages.add_message(request, level, outcome)
        return redirect("memory_approvals")
    context = {
        "entry_id": entry_id,
        "entry": entry,
        "outcome": message,
        "failed": bool(error),
        "expired": error == "expired",
    }
    return render(request, "memory/approvals.html#outcome", context, status=409 if error else 200)


def _changed_since_shown(request, entry_id: int, message: str) -> HttpResponse:
    """The proposal again in its new version, with the reason on top: nothing was decided."""
    entry = next((entry for entry in _reviewable(request.user) if entry.pk == entry_id), None)
    if entry is None:  # decided or expired meanwhile
        error, message = memory_conflict_reason(entry_id)
        context = {"entry_id": entry_id, "outcome": message, "failed": True}
        context["expired"] = error == "expired"
        return render(request, "memory/approvals.html#outcome", context, status=409)
    entry.notice = message
    context = {"entry": entry, "badge": True}
    return render(request, "memory/approvals.html#proposal", context, status=409)


def _edit_refused(request, entry_id: int, error: str, text: str) -> HttpResponse:
    """The item again, with the reason next to the edit box and the text as typed."""
    entries = _reviewable(request.user)
    for entry in entries:
        if entry.pk == entry_id:
            entry.edit_error, entry.edit_text = error, text
    if request.htmx:
        entry = next((entry for entry in entries if entry.pk == entry_id), None)
        if entry is None:  # decided or expired meanwhile
            error, message = memory_conflict_reason(entry_id)
            context = {
                "entry_id": entry_id,
                "outcome": message,
                "failed": True,
                "expired": error == "expired",
            }
            return render(request, "memory/approvals.html#outcome", context, status=409)
        context = {"entry": entry, "badge": True}
        return render(request, "memory/approvals.html#proposal", context, status=400)
    context = _approvals_context(request, entries=entries)
    return render(request, "memory/approvals.html", context, status=400)


@login_required
@require_POST
def proposals_decide(request: HttpRequest) -> HttpResponse:
    """Approve or reject every ticked item of every section as shown (a memory proposal by
    its revision, a skill change by its version), one decision each; what could not be
    decided is reported and the rest still happens. Unreadable input decides nothing."""
    notice = _decide_selected(request)
    if not request.htmx:
        messages.add_message(request, messages.INFO, notice)
        return redirect("memory_approvals")
    return render(request, "memory/approvals.html#list", _approvals_context(request, notice=notice))


def _decide_selected(request) -> str:
    """The bulk decision of `request`, reported in one line."""
    form = BulkDecisionForm(request.POST)
    if not form.is_valid():
        return form.errors.get("entry", ["Choose approve or reject."])[0]
    picked = []
    try:  # every section's values are read before anything is decided
        for section in bulk_sections():
            values = request.POST.getlist(section.bulk_field)
            if values:
                picked.append((section, section.bulk_parse(values)))
    except BulkInvalid as exc:
        return str(exc)
    entries = form.cleaned_data["entry"]
    if not entries and not picked:
        return NOTHING_SELECTED
    decision = form.cleaned_data["decision"]
    done, failures = 0, []
    for entry_id, revision in entries:
        entry, message, error = _decide_one(request, entry_id, decision, None, revision)
        if error:
            failures.append(f"#{entry_id}: {message}")
        else:
            done += 1
    for section, items in picked:
        outcome = section.bulk_decide(request.user, decision, items)
        done += outcome.done
        failures += outcome.failures
    if done:
        failures.insert(0, f"{DONE[decision]} {done} proposal{'s' if done != 1 else ''}.")
    return " ".join(failures)


# --- what the agent holds about me --------------------------------------------------------


@login_required
@require_GET
def my_memory_page(request: HttpRequest) -> HttpResponse:
    """Everything the agent holds or is asked to hold about the logged-in person (approved
    and proposed), with where it came from."""
    entries = _annotate(
        memory_entries_about(person=request.user), request.user, lambda entry: entry.source_chat
    )
    pending = sum(1 for entry in entries if entry.pending_change)
    return render(request, "memory/mine.html", {"entries": entries, "pending": pending})


@login_required
@require_POST
def my_memory_delete(request: HttpRequest, entry_id: int) -> HttpResponse:
    """Delete one entry about the logged-in person at once (audited); anything else is 404."""
    try:
        entry = memory_forget(entry_id=entry_id, person=request.user, via="dashboard")
    except ReviewNotAllowed:
        raise Http404("No such memory entry.") from None
    except ReviewConflict as exc:
        entry, error = None, f"Nothing to delete: {exc}."
    else:
        error = ""
    if not request.htmx:
        if error:
            messages.warning(request, error)
        else:
            messages.success(request, f"Deleted: “{entry.text}”")
        return redirect("memory_mine")
    context = {"entry_id": entry_id, "entry": entry, "error": error}
    return render(request, "memory/mine.html#deleted", context, status=409 if error else 200)
