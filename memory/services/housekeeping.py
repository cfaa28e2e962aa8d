"""Removals and housekeeping: a person or reviewer forgetting an entry at once, proposals
expiring past their time, and an unlinked actor's book moving to its Person after a link.

Each under a row lock, audited in the same transaction, like every write to memory.
"""

from django.db import transaction
from django.utils import timezone

from chats.models import Actor
from memory import policy
from memory.expiry import expired_tell_chats
from memory.models import MemoryBook, MemoryEntry, MemoryEvent, Scope
from memory.services.books import (
    LIVE,
    Change,
    Kind,
    ReviewConflict,
    ReviewNotAllowed,
    Status,
    _audit,
    _clear_proposal,
    _duplicate_of,
    _touch,
    memory_book,
)

EXPIRE_BATCH = 500  # proposals one expiry run handles at most; the rest, the next run


def memory_forget(
    *, entry_id: int, person=None, actor: Actor | None = None, via: str = MemoryEvent.Via.DASHBOARD
) -> MemoryEntry:
    """Remove an entry at once, as someone entitled to decide its book (a person deleting
    what the agent holds about them, a reviewer in the admin). Audited; kept for the trail."""
    reviewer = person if person is not None else (actor.person if actor else None)
    with transaction.atomic():
        entry = (
            MemoryEntry.objects.select_for_update(of=("self",))
            .select_related("book", "book__actor")
            .filter(pk=entry_id)
            .first()
        )
        if entry is None or not policy.may_review(entry.book, person=person, actor=actor):
            raise ReviewNotAllowed("you may not remove this memory entry")
        if entry.status not in LIVE:
            raise ReviewConflict(f"this entry is {entry.get_status_display().lower()} already")
        _audit(
            book=entry.book,
            entry=entry,
            kind=Kind.REMOVED,
            person=reviewer,
            actor=actor,
            via=via,
            change="remove",
            before=entry.text,
        )
        entry.status = Status.REMOVED
        _clear_proposal(entry, timezone.now())
        entry.save()
        return entry


def memory_expire_proposals(
    *, entry_ids: list[int] | None = None, book: MemoryBook | None = None, now=None
) -> int:
    """Expire every proposal past its time (only those in `entry_ids` or `book`, if given; at
    most EXPIRE_BATCH a call, the oldest first): an addition becomes expired, a replacement or
    removal is dropped, each audited; then the chat each was made in gets one notice that
    names none of them (memory.expiry). Returns how many expired."""
    now = now or timezone.now()
    due = MemoryEntry.objects.exclude(pending_change="").filter(proposal_expires_at__lte=now)
    if entry_ids is not None:
        due = due.filter(pk__in=entry_ids)
    if book is not None:
        due = due.filter(book=book)
    count = 0
    told: dict[int, list[int]] = {}  # chat the proposal was made in → entries expired there
    ids = due.order_by("proposal_expires_at", "id").values_list("pk", flat=True)[:EXPIRE_BATCH]
    for entry_id in list(ids):
        with transaction.atomic():
            entry = (
                MemoryEntry.objects.select_for_update()
                .filter(pk=entry_id, proposal_expires_at__lte=now)
                .exclude(pending_change="")
                .first()
            )
            if entry is None:
                continue
            change = entry.pending_change
            _audit(
                book=entry.book,
                entry=entry,
                kind=Kind.EXPIRED,
                via=MemoryEvent.Via.SYSTEM,
                change=change,
                after=entry.proposed_text if change == Change.REPLACE else entry.text,
            )
            if change == Change.ADD:
                entry.status = Status.EXPIRED
            if entry.proposal_chat_id is not None:
                told.setdefault(entry.proposal_chat_id, []).append(entry.pk)
            _clear_proposal(entry, now)
            entry.save()
            count += 1
    expired_tell_chats(told)
    return count


def memory_adopt_actor_book(*, actor: Actor, person) -> int:
    """Move what was remembered about an unlinked actor into its Person's book (after a
    link), audited per entry; duplicates of the Person's entries are dropped. Returns moved."""
    with transaction.atomic():
        source = MemoryBook.objects.filter(scope=Scope.USER, actor=actor).first()
        if source is None:
            return 0
        target = memory_book(scope=Scope.USER, person=person)
        MemoryBook.objects.select_for_update().filter(pk__in=[source.pk, target.pk]).count()
        existing = list(target.entries.filter(status__in=LIVE))
        moved = 0
        for entry in source.entries.filter(status__in=LIVE).order_by("id"):
            duplicate = _duplicate_of(existing, entry.text)
            _audit(
                book=target,
                entry=entry,
                kind=Kind.MOVED,
                via=MemoryEvent.Via.SYSTEM,
                person=person,
                actor=actor,
                before=entry.text,
                detail={"from_book": source.pk, "to_book": target.pk, "duplicate": bool(duplicate)},
            )
            entry.book = target
            _touch(entry, timezone.now())
            if duplicate is not None:
                entry.status = Status.REMOVED
                _clear_proposal(entry, timezone.now())
            entry.save()
            existing.append(entry)
            moved += 1
        return moved
