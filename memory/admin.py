"""Django admin for team memory: books (budget override), entries with review actions and
their whole story, and the read-only audit trail (blocked writes included).

Entries change only through memory.services: the admin shows them read-only, and its actions
approve, reject or remove as the logged-in person with via="admin", so the same policy applies
as everywhere else (staff decide team and chat entries; a person's entries are theirs).
A pending entry's page also carries a review form: approve (with the text edited first, if
the reviewer wants), or reject, through memory_review like the dashboard.
Entry text is untrusted (it may be a blocked injection attempt): it is always escaped.

Every decision is bound to the revision the reviewer saw: the review form carries it, and
each row of the entry list carries its own (`rev_<id>`) for the bulk actions; a proposal
revised in between is refused ("changed after you saw it") and nothing changes.

What staff may read: team and chat entries, and a person's shared entries (they already
reach group prompts). The text of a person's *private* entries (and of the audit events of
user books that may hold it) is shown only to superusers, holders of the
`memory.read_private_memory` permission, and the person it is about; other staff see that
an entry exists, its status and its history, never its words, and text search skips it.
"""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import BooleanField, Case, Count, Q, Value, When
from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from chats.admin import NoWrites, ReadOnlyAdmin, admin_link
from hermes_site.scanning import reveal_hidden
from memory import policy
from memory.forms import DecisionForm
from memory.models import MemoryBook, MemoryEntry, MemoryEvent, Scope, Visibility
from memory.reviews import memory_review
from memory.selectors import memory_conflict_reason
from memory.services import (
    LIVE,
    ReviewConflict,
    ReviewInvalid,
    ReviewNotAllowed,
    ReviewStale,
    book_usage,
    memory_expire_proposals,
    memory_forget,
)

SHORT_TEXT = 80
MAX_FAILURES_LISTED = 20
HIDDEN = "(private: not shown)"
PRIVATE_PERMISSION = "memory.read_private_memory"


def may_read_private(user) -> bool:
    """Superusers and holders of the dedicated permission read private entries' text."""
    return bool(user.is_active and user.has_perm(PRIVATE_PERMISSION))


def _private_q(prefix: str = "") -> Q:
    """Rows whose text may be a person's private fact (for an event: its entry is private,
    or it belongs to a user book without an entry, like a blocked write)."""
    if prefix:
        return Q(book__scope=Scope.USER) & (
            Q(entry__isnull=True) | ~Q(entry__visibility=Visibility.SHARED)
        )
    return Q(book__scope=Scope.USER) & ~Q(visibility=Visibility.SHARED)


def _about(user) -> Q:
    return Q(book__person=user) | Q(book__actor__person=user)


def _with_readable(request, queryset, private: Q):
    """Annotate `text_readable`: may this reader see the row's words? Computed in the query,
    per request (a ModelAdmin is shared by every request, so it keeps no reader state)."""
    if may_read_private(request.user):
        return queryset.annotate(text_readable=Value(True, output_field=BooleanField()))
    hidden = private & ~_about(request.user)
    return queryset.annotate(
        text_readable=Case(
            When(hidden, then=Value(False)), default=Value(True), output_field=BooleanField()
        )
    )


def _restricted_search(request, queryset, search_term, results, private: Q):
    """Without the permission, a text search never finds private rows by their words (a
    match would confirm what they say); by the person's name it still does."""
    if not search_term or may_read_private(request.user):
        return results
    names = Q(book__person__username__icontains=search_term) | Q(
        book__actor__display_name__icontains=search_term
    )
    by_name = queryset.filter(private).filter(names)
    own = queryset.filter(private).filter(_about(request.user))
    return results.exclude(private) | (results & (by_name | own))


def _short(text: str) -> str:
    """One line of at most SHORT_TEXT characters, hidden code points shown as markers."""
    return Truncator(" ".join(reveal_hidden(text or "").split())).chars(SHORT_TEXT)


def _who(event: MemoryEvent) -> str:
    parts = []
    if event.person_id:
        parts.append(admin_link(event.person, event.person.get_username()))
    if event.actor_id:
        parts.append(format_html("{} ({})", event.actor.display_name, event.actor.channel))
    if not parts:
        return "the system" if event.via == MemoryEvent.Via.SYSTEM else "—"
    return format_html_join(" / ", "{}", ((part,) for part in parts))


# --- books --------------------------------------------------------------------------------


@admin.register(MemoryBook)
class MemoryBookAdmin(admin.ModelAdmin):
    list_display = ("__str__", "scope", "budget_display", "usage", "live_entries", "created_at")
    list_filter = ("scope",)
    list_select_related = ("chat", "person", "actor")
    search_fields = ("chat__chat_key", "chat__title", "person__username", "actor__display_name")
    fields = ("scope", "chat", "person", "actor", "budget_chars", "usage", "created_at")
    readonly_fields = ("scope", "chat", "person", "actor", "usage", "created_at")

    def get_queryset(self, request):
        live = Count("entries", filter=Q(entries__status__in=LIVE))
        return super().get_queryset(request).annotate(live_total=live)

    def has_add_permission(self, request):
        return False  # books come into being with their first proposal

    def has_delete_permission(self, request, obj=None):
        return False  # deleting a book would delete its audit trail

    @admin.display(description="budget")
    def budget_display(self, book: MemoryBook) -> str:
        suffix = "" if book.budget_chars else " (default)"
        return f"{book.budget:,} chars{suffix}"

    @admin.display(description="usage")
    def usage(self, book: MemoryBook) -> str:
        usage = book_usage(book)
        return f"{usage.used:,} of {usage.budget:,} chars ({usage.percent} %)"

    @admin.display(description="live entries", ordering="live_total")
    def live_entries(self, book: MemoryBook):
        url = reverse("admin:memory_memoryentry_changelist") + f"?book__id__exact={book.pk}"
        return format_html('<a href="{}">{}</a>', url, book.live_total)


# --- entries ------------------------------------------------------------------------------


class PendingFilter(admin.SimpleListFilter):
    title = "waiting for a decision"
    parameter_name = "pending"

    def lookups(self, request, model_admin):
        return (("yes", "Yes"), ("no", "No"))

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(pending_change="")
        if self.value() == "no":
            return queryset.filter(pending_change="")
        return queryset


@admin.register(MemoryEntry)
class MemoryEntryAdmin(NoWrites, admin.ModelAdmin):
    list_display = (
        "id",
        "short_text",
        "scope",
        "subject",
        "status",
        "pending",
        "visibility",
        "proposal_expires_at",
        "updated_at",
    )
    list_filter = (PendingFilter, "status", "pending_change", "book__scope", "visibility")
    list_select_related = ("book__chat", "book__person", "book__actor")
    search_fields = (
        "text",
        "proposed_text",
        "book__person__username",
        "book__actor__display_name",
        "book__chat__chat_key",
        "book__chat__title",
    )
    ordering = ("-updated_at", "-id")
    actions = ("approve_selected", "reject_selected", "remove_selected")
    fields = (
        "book",
        "text_shown",
        "status",
        "visibility",
        "revision",
        "pending_change",
        "proposed_text_shown",
        "proposed_at",
        "proposal_expires_at",
        "proposed_by_actor",
        "proposed_by_person",
        "proposal_chat",
        "proposal_message",
        "author_person",
        "author_actor",
        "source_chat",
        "source_message",
        "created_at",
        "updated_at",
        "approved_at",
        "story",
    )
    readonly_fields = fields

    change_form_template = "admin/memory/memoryentry/change_form.html"

    def get_queryset(self, request):
        return _with_readable(request, super().get_queryset(request), _private_q())

    def get_search_results(self, request, queryset, search_term):
        results, distinct = super().get_search_results(request, queryset, search_term)
        return _restricted_search(request, queryset, search_term, results, _private_q()), distinct

    def _shows(self, entry: MemoryEntry) -> bool:
        return bool(getattr(entry, "text_readable", False))

    def action_checkbox(self, entry: MemoryEntry):
        """The row's checkbox, plus the revision this row shows, so that a bulk decision is
        bound to what the reviewer saw."""
        box = super().action_checkbox(entry)
        return format_html(
            '{}<input type="hidden" name="rev_{}" value="{}">', box, entry.pk, entry.revision
        )

    def has_review_permission(self, request) -> bool:
        """Who sees the actions; memory.services still decides each entry."""
        user = request.user
        return bool(user.is_active and user.is_staff)

    def get_urls(self):
        review = self.admin_site.admin_view(self.review_view)
        return [
            path("<int:entry_id>/review/", review, name="memory_memoryentry_review"),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The entry's page; a pending change the reviewer may decide gets the review form."""
        context = dict(extra_context or {})
        entry = self.get_object(request, object_id)
        if entry is not None and entry.pending_change:
            memory_expire_proposals(entry_ids=[entry.pk])
            entry.refresh_from_db()
        if (
            entry is not None
            and entry.pending_change
            and self.has_review_permission(request)
            and policy.may_review(entry.book, person=request.user)
        ):
            replace = entry.pending_change == MemoryEntry.Change.REPLACE
            context["review"] = {
                "url": reverse("admin:memory_memoryentry_review", args=[entry.pk]),
                "change": entry.get_pending_change_display(),
                "editable": entry.pending_change != MemoryEntry.Change.REMOVE,
                "text": entry.proposed_text if replace else entry.text,
                "revision": entry.revision,
                "expires_at": entry.proposal_expires_at,
            }
        return super().change_view(request, object_id, form_url, context)

    def review_view(self, request, entry_id: int):
        """Approve (the edited text, when it was edited) or reject one pending change."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_review_permission(request):
            raise PermissionDenied
        back = redirect("admin:memory_memoryentry_change", entry_id)
        form = DecisionForm(request.POST)
        if not form.is_valid():
            self.message_user(request, "Choose approve or reject.", messages.ERROR)
            return back
        decision = form.cleaned_data["decision"]
        text = form.cleaned_data["text"] if "text" in request.POST else None
        try:
            entry = memory_review(
                entry_id=entry_id,
                decision=decision,
                revision=form.cleaned_data["revision"],
                person=request.user,
                text=text,
                via="admin",
            )
        except ReviewNotAllowed:
            self.message_user(request, "Not changed: you may not decide it.", messages.WARNING)
        except ReviewStale as exc:
            self.message_user(request, f"Not changed: {exc}.", messages.WARNING)
        except ReviewConflict:
            self.message_user(request, memory_conflict_reason(entry_id)[1], messages.WARNING)
        except ReviewInvalid as exc:
            self.message_user(request, f"Not saved: {exc}.", messages.ERROR)
        else:
            outcome = "Approved" if decision == "approve" else "Rejected"
            self.message_user(request, f"{outcome}: “{_short(entry.text)}”", messages.SUCCESS)
        return back

    @admin.display(description="text")
    def short_text(self, entry: MemoryEntry) -> str:
        return _short(entry.text) if self._shows(entry) else HIDDEN

    @admin.display(description="text")
    def text_shown(self, entry: MemoryEntry) -> str:
        return reveal_hidden(entry.text) if self._shows(entry) else HIDDEN

    @admin.display(description="proposed text")
    def proposed_text_shown(self, entry: MemoryEntry) -> str:
        if not entry.proposed_text:
            return "—"
        return reveal_hidden(entry.proposed_text) if self._shows(entry) else HIDDEN

    @admin.display(description="scope", ordering="book__scope")
    def scope(self, entry: MemoryEntry) -> str:
        return entry.book.get_scope_display()

    @admin.display(description="about")
    def subject(self, entry: MemoryEntry) -> str:
        return entry.book.subject_name

    @admin.display(description="pending change")
    def pending(self, entry: MemoryEntry) -> str:
        if entry.pending_change == MemoryEntry.Change.REPLACE:
            return f"replace → {_short(entry.proposed_text) if self._shows(entry) else HIDDEN}"
        return entry.get_pending_change_display() if entry.pending_change else "—"

    @admin.display(description="story (every event, oldest first)")
    def story(self, entry: MemoryEntry) -> str:
        events = entry.events.select_related(
            "person", "actor", "source_chat", "source_message"
        ).order_by("created_at", "id")
        shows = self._shows(entry)
        rows = format_html_join(
            "",
            '<tr class="memory-event event-{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
            '<td>{}</td><td>{}</td><td class="before">{}</td><td class="after">{}</td>'
            "<td>{}</td></tr>",
            (
                (
                    event.kind,
                    number,
                    event.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                    event.get_kind_display(),
                    event.change or "—",
                    event.get_via_display(),
                    _who(event),
                    (reveal_hidden(event.before) if shows else HIDDEN) if event.before else "—",
                    (reveal_hidden(event.after) if shows else HIDDEN) if event.after else "—",
                    _source(event),
                )
                for number, event in enumerate(events, 1)
            ),
        )
        return format_html(
            '<table class="memory-story"><thead><tr><th>#</th><th>when</th><th>event</th>'
            "<th>change</th><th>via</th><th>who</th><th>before</th><th>after</th>"
            "<th>source</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    def _report(self, request, done: int, verb: str, failures: list[str]) -> None:
        if done:
            self.message_user(request, f"{verb} {done} memory entr{'y' if done == 1 else 'ies'}.")
        for failure in failures[:MAX_FAILURES_LISTED]:
            self.message_user(request, failure, messages.WARNING)
        if len(failures) > MAX_FAILURES_LISTED:
            more = len(failures) - MAX_FAILURES_LISTED
            self.message_user(request, f"… and {more} more not changed.", messages.WARNING)

    def _each(self, request, queryset, verb: str, act, *, shown: bool = False) -> None:
        done, failures = 0, []
        for entry_id in queryset.order_by("id").values_list("pk", flat=True):
            try:
                if shown:
                    act(entry_id, _shown_revision(request, entry_id))
                else:
                    act(entry_id)
            except ReviewNotAllowed:
                failures.append(f"#{entry_id}: not changed, you may not decide it.")
            except ReviewStale as exc:
                failures.append(f"#{entry_id}: not changed. {exc}.")
            except ReviewConflict:
                failures.append(f"#{entry_id}: {memory_conflict_reason(entry_id)[1]}")
            except ReviewInvalid as exc:
                failures.append(f"#{entry_id}: not changed, {exc}.")
            else:
                done += 1
        self._report(request, done, verb, failures)

    @admin.action(description="Approve selected proposals", permissions=["review"])
    def approve_selected(self, request, queryset) -> None:
        def act(entry_id, revision):
            memory_review(
                entry_id=entry_id,
                decision="approve",
                revision=revision,
                person=request.user,
                via="admin",
            )

        self._each(request, queryset, "Approved", act, shown=True)

    @admin.action(description="Reject selected proposals", permissions=["review"])
    def reject_selected(self, request, queryset) -> None:
        def act(entry_id, revision):
            memory_review(
                entry_id=entry_id,
                decision="reject",
                revision=revision,
                person=request.user,
                via="admin",
            )

        self._each(request, queryset, "Rejected", act, shown=True)

    @admin.action(description="Remove selected entries", permissions=["review"])
    def remove_selected(self, request, queryset) -> None:
        def act(entry_id):
            memory_forget(entry_id=entry_id, person=request.user, via="admin")

        self._each(request, queryset, "Removed", act)


def _shown_revision(request, entry_id: int) -> int:
    """The revision of `entry_id` the list showed this reviewer; an entry the list did not
    show (selected "across all pages", or a forged post) counts as changed since."""
    try:
        return int(request.POST.get(f"rev_{entry_id}", ""))
    except ValueError:
        raise ReviewStale() from None


def _source(event: MemoryEvent) -> str:
    if not event.source_chat_id and not event.source_message_id:
        return "—"
    chat = admin_link(event.source_chat) if event.source_chat_id else ""
    message = (
        admin_link(event.source_message, f"message #{event.source_message_id}")
        if event.source_message_id
        else ""
    )
    return format_html_join(" · ", "{}", ((part,) for part in (chat, message) if part))


# --- the audit trail ----------------------------------------------------------------------


@admin.register(MemoryEvent)
class MemoryEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "kind",
        "change",
        "via",
        "book",
        "entry_link",
        "who",
        "short_before",
        "short_after",
    )
    list_filter = ("kind", "via", "change", "book__scope")
    list_select_related = ("book__chat", "book__person", "book__actor", "entry", "person", "actor")
    search_fields = ("before", "after", "person__username", "actor__display_name")
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    fields = (
        "created_at",
        "kind",
        "change",
        "via",
        "book",
        "entry",
        "person",
        "actor",
        "before_shown",
        "after_shown",
        "source_chat",
        "source_message",
        "detail",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        return _with_readable(request, super().get_queryset(request), _private_q("entry"))

    def get_search_results(self, request, queryset, search_term):
        results, distinct = super().get_search_results(request, queryset, search_term)
        private = _private_q("entry")
        return _restricted_search(request, queryset, search_term, results, private), distinct

    def _text(self, event: MemoryEvent, text: str) -> str:
        return text if getattr(event, "text_readable", False) else HIDDEN

    @admin.display(description="before")
    def before_shown(self, event: MemoryEvent) -> str:
        return self._text(event, reveal_hidden(event.before)) if event.before else "—"

    @admin.display(description="after")
    def after_shown(self, event: MemoryEvent) -> str:
        return self._text(event, reveal_hidden(event.after)) if event.after else "—"

    @admin.display(description="entry", ordering="entry_id")
    def entry_link(self, event: MemoryEvent) -> str:
        if event.entry_id is None:
            return "—"
        return admin_link(event.entry, f"#{event.entry_id}")

    @admin.display(description="who")
    def who(self, event: MemoryEvent) -> str:
        return _who(event)

    @admin.display(description="before")
    def short_before(self, event: MemoryEvent) -> str:
        return self._text(event, _short(event.before)) if event.before else "—"

    @admin.display(description="after")
    def short_after(self, event: MemoryEvent) -> str:
        return self._text(event, _short(event.after)) if event.after else "—"
