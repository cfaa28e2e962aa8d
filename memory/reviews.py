"""Decisions by people on what the agent proposed: approve (optionally with an edited text)
or reject, as someone entitled, on exactly the version they were shown.

Like every write to memory, under a row lock with the audit event in the same transaction.
"""

from django.db import transaction
from django.utils import timezone

from chats.models import Actor
from hermes_site.scanning import scan_text
from memory import policy
from memory.models import MemoryBook, MemoryEntry, MemoryEvent
from memory.services import (
    LIVE,
    Change,
    Kind,
    ReviewConflict,
    ReviewInvalid,
    ReviewNotAllowed,
    ReviewStale,
    Status,
    book_usage,
    memory_expire_proposals,
    normalise_text,
    scan_book_after,
)
from memory.services.books import _audit, _clear_proposal


def memory_review(
    *,
    entry_id: int,
    decision: str,
    revision: int,
    person=None,
    actor: Actor | None = None,
    text: str | None = None,
    via: str = MemoryEvent.Via.DASHBOARD,
) -> MemoryEntry:
    """Approve or reject the change waiting on an entry, as `person` (or channel `actor`),
    exactly as the reviewer saw it: `revision` is the entry's revision shown to them.

    Only someone entitled (policy.may_review) decides; an outsider changes nothing. A
    proposal revised since it was shown raises ReviewStale and changes nothing. With `text`,
    an approval applies the edited text instead (scanned alone and within its book, budget-
    checked, the edit audited). Raises ReviewNotAllowed, ReviewConflict (ReviewStale) or
    ReviewInvalid."""
    if decision not in ("approve", "reject"):
        raise ValueError("decision must be approve or reject")
    memory_expire_proposals(entry_ids=[entry_id])
    reviewer = person if person is not None else (actor.person if actor else None)
    with transaction.atomic():
        entry = (
            MemoryEntry.objects.select_for_update(of=("self",))
            .select_related("book", "book__actor")
            .filter(pk=entry_id)
            .first()
        )
        if entry is None or not policy.may_review(entry.book, person=person, actor=actor):
            raise ReviewNotAllowed("you may not decide this memory entry")
        if not entry.pending_change:
            raise ReviewConflict(f"this entry was already decided ({entry.get_status_display()})")
        if entry.revision != revision:
            raise ReviewStale()
        book = entry.book
        MemoryBook.objects.select_for_update().filter(pk=book.pk).first()
        change = entry.pending_change
        now = timezone.now()
        common = {"book": book, "entry": entry, "person": reviewer, "actor": actor, "via": via}
        if decision == "reject":
            if change == Change.ADD:
                entry.status = Status.REJECTED
            rejected_text = entry.proposed_text if change == Change.REPLACE else entry.text
            _audit(**common, kind=Kind.REJECTED, change=change, after=rejected_text)
            _clear_proposal(entry, now)
            entry.save()
            return entry
        if text is not None and change != Change.REMOVE:
            _edit_before_approve(entry, text, common)
        before = entry.text
        if change == Change.ADD:
            entry.status, entry.approved_at = Status.ACTIVE, now
            _audit(**common, kind=Kind.APPROVED, change=change, after=entry.text)
        elif change == Change.REPLACE:
            entry.text = entry.proposed_text
            _audit(**common, kind=Kind.APPROVED, change=change, before=before, after=entry.text)
        else:
            entry.status = Status.REMOVED
            _audit(**common, kind=Kind.APPROVED, change=change, before=before)
        _clear_proposal(entry, now)
        entry.save()
        return entry


def _edit_before_approve(entry: MemoryEntry, text: str, common: dict) -> None:
    new = normalise_text(text)
    current = entry.proposed_text if entry.pending_change == Change.REPLACE else entry.text
    if new == current:
        return
    if not new:
        raise ReviewInvalid("the edited text is empty")
    result = scan_text(new, kind="memory")
    if not result.allowed:
        raise ReviewInvalid(f"the edited text was blocked: {result.summary()}")
    others = list(entry.book.entries.filter(status__in=LIVE).exclude(pk=entry.pk).order_by("id"))
    if not scan_book_after(others, new).allowed:
        raise ReviewInvalid(
            "the edited text was blocked: together with the other entries of this book it "
            "reads as an instruction or a secret"
        )
    usage = book_usage(entry.book, others)
    if usage.used + len(new) > usage.budget:
        raise ReviewInvalid(
            f"the edited text does not fit: {usage.used:,} of {usage.budget:,} chars are "
            f"used by other entries, the text has {len(new):,}"
        )
    _audit(**common, kind=Kind.EDITED, change=entry.pending_change, before=current, after=new)
    if entry.pending_change == Change.REPLACE:
        entry.proposed_text = new
    else:
        entry.text = new
