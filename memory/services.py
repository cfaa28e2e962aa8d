"""Every write to memory: proposals from the agent, decisions by people, expiry, moves.

Each status change happens here, under a row lock on the book (or the entry), with its
audit event written in the same transaction. Nothing is stored before the scanner passed
it, and a book never holds more than its budget of live text (approved entries plus
pending additions), even when two writes race.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from chats.models import Actor, Chat, Message
from hermes_site.scanning import scan_text
from memory import policy
from memory.models import MemoryBook, MemoryEntry, MemoryEvent, Scope, Visibility
from memory.signals import proposal_created

logger = logging.getLogger(__name__)

Status = MemoryEntry.Status
Change = MemoryEntry.Change
Kind = MemoryEvent.Kind
LIVE = (Status.ACTIVE, Status.PENDING)
MAX_AUDIT_TEXT = 4000


class ReviewNotAllowed(PermissionError):
    """The person (or actor) may not decide this entry."""


class ReviewConflict(Exception):
    """The entry has nothing waiting for a decision any more (decided, expired, gone)."""


class ReviewInvalid(ValueError):
    """An edit made while approving was refused (scanner or budget); nothing changed."""


# --- Books ---------------------------------------------------------------------------------


def memory_book(
    *, scope: str, chat: Chat | None = None, person=None, actor: Actor | None = None
) -> MemoryBook:
    """The book of one scope instance, created once even under races.

    A user book belongs to the Person when the actor is linked to one, else to the actor."""
    if scope == Scope.TEAM:
        lookup = {"scope": scope}
    elif scope == Scope.CHAT:
        if chat is None:
            raise ValueError("a chat book needs a chat")
        lookup = {"scope": scope, "chat": chat}
    elif scope == Scope.USER:
        if person is None and actor is not None and actor.person_id is not None:
            person = actor.person
        if person is not None:
            lookup = {"scope": scope, "person": person}
        elif actor is not None:
            lookup = {"scope": scope, "actor": actor}
        else:
            raise ValueError("a user book needs a person or an actor")
    else:
        raise ValueError(f"unknown scope {scope!r}")
    try:
        book, _ = MemoryBook.objects.get_or_create(**lookup)
    except IntegrityError:
        book = MemoryBook.objects.get(**lookup)
    return book


@dataclass(frozen=True)
class Usage:
    used: int
    budget: int

    @property
    def percent(self) -> int:
        return round(100 * self.used / self.budget) if self.budget else 100

    def __str__(self) -> str:
        return f"{self.percent} % of {self.budget:,} chars"


def entry_cost(entry: MemoryEntry) -> int:
    """Characters an entry takes from its book's budget (a pending replacement may grow it)."""
    if entry.status not in LIVE:
        return 0
    cost = len(entry.text)
    if entry.pending_change == Change.REPLACE:
        cost = max(cost, len(entry.proposed_text))
    return cost


def book_usage(book: MemoryBook, entries: list[MemoryEntry] | None = None) -> Usage:
    """Live characters of `book` against its budget."""
    if entries is None:
        entries = list(book.entries.filter(status__in=LIVE))
    return Usage(sum(entry_cost(entry) for entry in entries), book.budget)


# --- Proposals from the agent ------------------------------------------------------------


@dataclass(frozen=True)
class Author:
    """Who asked for a change, and where: the turn's trigger in an agent write."""

    actor: Actor | None = None
    person: object = None
    chat: Chat | None = None
    message: Message | None = None
    via: str = MemoryEvent.Via.AGENT
    asked: bool = False  # the subject explicitly asked for this change in this turn


@dataclass
class Outcome:
    """What a proposal did, in words the model can act on."""

    code: str  # saved, pending, removed, duplicate, overflow, ambiguous, not_found, blocked,
    # busy, invalid
    message: str
    entry: MemoryEntry | None = None
    usage: Usage | None = None
    findings: list = field(default_factory=list)

    @property
    def stored(self) -> bool:
        return self.code in ("saved", "pending", "removed")


def normalise_text(text: str) -> str:
    """One line, single spaces: entries are short declarative facts, not documents."""
    return " ".join(str(text or "").split())


def _key(text: str) -> str:
    return normalise_text(text).casefold().rstrip(".。!！ ")


def _lock(book: MemoryBook) -> list[MemoryEntry]:
    MemoryBook.objects.select_for_update().filter(pk=book.pk).first()
    return list(book.entries.filter(status__in=LIVE).order_by("id"))


def _listing(entries: list[MemoryEntry]) -> str:
    if not entries:
        return "(no entries)"
    return "\n".join(f"{n}. {entry.summary_line()}" for n, entry in enumerate(entries, 1))


def _audit(
    *,
    book: MemoryBook,
    entry: MemoryEntry | None,
    kind: str,
    author: Author | None = None,
    person=None,
    actor: Actor | None = None,
    via: str | None = None,
    change: str = "",
    before: str = "",
    after: str = "",
    detail: dict | None = None,
) -> MemoryEvent:
    return MemoryEvent.objects.create(
        book=book,
        entry=entry,
        kind=kind,
        change=change,
        via=via or (author.via if author else MemoryEvent.Via.SYSTEM),
        actor=actor if actor is not None else (author.actor if author else None),
        person=person if person is not None else (author.person if author else None),
        before=before[:MAX_AUDIT_TEXT],
        after=after[:MAX_AUDIT_TEXT],
        source_chat=author.chat if author else None,
        source_message=author.message if author else None,
        detail=detail or {},
    )


def _needs_approval(book: MemoryBook, author: Author) -> bool:
    rule = policy.approval_policy(book.scope)
    if rule == "auto":
        return False
    if book.scope == Scope.USER:
        subject_asked = author.asked and policy.book_is_about(
            book, person=author.person, actor=author.actor
        )
        return not subject_asked
    return True


def _announce(entry: MemoryEntry) -> None:
    def send() -> None:
        try:
            proposal_created.send(sender=MemoryEntry, entry=entry)
        except Exception:  # a notifier's failure must not undo or hide the proposal
            logger.exception("a proposal_created receiver failed for entry %s", entry.pk)

    transaction.on_commit(send)


def _expires_at():
    return timezone.now() + timedelta(days=settings.MEMORY_PROPOSAL_TTL_DAYS)


def _blocked(book: MemoryBook, author: Author, change: str, text: str, result) -> Outcome:
    with transaction.atomic():
        _audit(
            book=book,
            entry=None,
            kind=Kind.BLOCKED,
            author=author,
            change=change,
            after=text,
            detail={"findings": [finding.category for finding in result.findings]},
        )
    return Outcome(
        "blocked",
        f"Blocked, nothing was stored: {result.summary()} Memory holds declarative facts "
        "only; never instructions, hidden characters, secrets or commands that send data out.",
        findings=list(result.findings),
    )


def memory_propose(
    *,
    book: MemoryBook,
    change: str,
    author: Author,
    content: str = "",
    match: str = "",
    visibility: str = "",
) -> Outcome:
    """Propose `add`, `replace` (the one entry containing `match`) or `remove` in `book`.

    Scans new text first (a blocked write stores nothing and is audited), refuses exact
    duplicates, ambiguous or unknown targets and anything past the budget (the error lists
    usage and the current entries so the model can consolidate), and otherwise stores the
    change as pending, or applies it when the policy or the subject's own request allows."""
    content = normalise_text(content)
    match = str(match or "").strip()
    if change not in (Change.ADD, Change.REPLACE, Change.REMOVE):
        return Outcome("invalid", "Error: action must be add, replace or remove.")
    if change in (Change.ADD, Change.REPLACE) and not content:
        return Outcome("invalid", f"Error: {change} needs the new text in `content`.")
    if change in (Change.REPLACE, Change.REMOVE) and not match:
        return Outcome("invalid", f"Error: {change} needs `old_text`, a unique part of the entry.")
    if content:
        result = scan_text(content, kind="memory")
        if not result.allowed:
            return _blocked(book, author, change, content, result)
    visibility = (visibility or Visibility.PRIVATE) if book.scope == Scope.USER else ""
    memory_expire_proposals(book=book)  # an expired proposal no longer takes budget

    with transaction.atomic():
        entries = _lock(book)
        usage = book_usage(book, entries)
        if change == Change.ADD:
            return _add(book, entries, usage, author, content, visibility)
        targets = _find(entries, match)
        if not targets:
            return Outcome(
                "not_found",
                f"Error: no entry in {book} contains {match!r}; nothing changed. "
                f"Entries ({usage}):\n{_listing(entries)}",
                usage=usage,
            )
        if len(targets) > 1:
            return Outcome(
                "ambiguous",
                f"Error: {match!r} matches {len(targets)} entries in {book}; nothing changed. "
                f"Quote more of the one you mean:\n{_listing(targets)}",
                usage=usage,
            )
        target = targets[0]
        if target.status == Status.ACTIVE and target.pending_change:
            return Outcome(
                "busy",
                f"Error: a change to this entry already waits for approval "
                f"({target.summary_line()}); nothing changed.",
                usage=usage,
            )
        if change == Change.REPLACE:
            return _replace(book, entries, usage, author, target, content)
        return _remove(book, entries, author, target)


def _find(entries: list[MemoryEntry], match: str) -> list[MemoryEntry]:
    exact = [entry for entry in entries if match in entry.text]
    if exact:
        return exact
    folded = _key(match)
    return [entry for entry in entries if folded and folded in _key(entry.text)]


def _duplicate_of(entries: list[MemoryEntry], content: str, skip=None) -> MemoryEntry | None:
    key = _key(content)
    for entry in entries:
        if entry is skip:
            continue
        if _key(entry.text) == key or (
            entry.pending_change == Change.REPLACE and _key(entry.proposed_text) == key
        ):
            return entry
    return None


def _overflow(book, entries, usage, needed: int) -> Outcome:
    return Outcome(
        "overflow",
        f"Error: {book} is full: {usage.used:,} of {usage.budget:,} chars used "
        f"(approved + pending), and this needs {needed:,} more. Nothing was stored. "
        f"Consolidate first: replace several entries with one shorter entry, or remove "
        f"stale ones, then retry.\nCurrent entries:\n{_listing(entries)}",
        usage=usage,
    )


def _add(book, entries, usage, author: Author, content: str, visibility: str) -> Outcome:
    duplicate = _duplicate_of(entries, content)
    if duplicate is not None:
        return Outcome(
            "duplicate",
            f"Already in {book} ({duplicate.summary_line()}); not stored twice. Usage {usage}.",
            entry=duplicate,
            usage=usage,
        )
    if usage.used + len(content) > usage.budget:
        return _overflow(book, entries, usage, len(content))
    now = timezone.now()
    pending = _needs_approval(book, author)
    entry = MemoryEntry.objects.create(
        book=book,
        text=content,
        visibility=visibility,
        status=Status.PENDING if pending else Status.ACTIVE,
        pending_change=Change.ADD if pending else Change.NONE,
        proposed_at=now,
        proposal_expires_at=_expires_at() if pending else None,
        proposed_by_actor=author.actor,
        proposal_message=author.message,
        author_actor=author.actor,
        author_person=author.person,
        source_chat=author.chat,
        source_message=author.message,
        created_at=now,
        updated_at=now,
        approved_at=None if pending else now,
    )
    _audit(book=book, entry=entry, kind=Kind.PROPOSED, author=author, change="add", after=content)
    usage = book_usage(book)
    if pending:
        _announce(entry)
        return Outcome(
            "pending",
            f"Proposed for {book}: pending approval by {_approver(book)} — {usage}.",
            entry=entry,
            usage=usage,
        )
    _audit(book=book, entry=entry, kind=Kind.AUTO_APPROVED, author=author, change="add")
    return Outcome("saved", f"Saved to {book} — {usage}.", entry=entry, usage=usage)


def _replace(book, entries, usage, author: Author, target: MemoryEntry, content: str) -> Outcome:
    if _key(content) == _key(target.text):
        return Outcome(
            "duplicate",
            f"The entry already says that; nothing changed. Usage {usage}.",
            usage=usage,
        )
    duplicate = _duplicate_of(entries, content, skip=target)
    if duplicate is not None:
        return Outcome(
            "duplicate",
            f"Another entry already says that ({duplicate.summary_line()}); nothing changed. "
            f"Remove this one instead if it is stale. Usage {usage}.",
            usage=usage,
        )
    growth = len(content) - entry_cost(target)
    if growth > 0 and usage.used + growth > usage.budget:
        return _overflow(book, entries, usage, growth)
    now = timezone.now()
    before = target.text
    pending = _needs_approval(book, author)
    if target.status == Status.PENDING:
        # Still a proposal: the author revises it; it keeps waiting for (or gets) approval.
        target.text = content
        target.updated_at = now
        target.proposal_expires_at = _expires_at() if pending else None
        kind = Kind.EDITED
        if not pending:
            target.status, target.pending_change, target.approved_at = Status.ACTIVE, "", now
        target.save()
        _audit(
            book=book,
            entry=target,
            kind=kind,
            author=author,
            change="replace",
            before=before,
            after=content,
        )
        if not pending:
            _audit(book=book, entry=target, kind=Kind.AUTO_APPROVED, author=author, change="add")
    elif pending:
        target.pending_change = Change.REPLACE
        target.proposed_text = content
        target.proposed_at = now
        target.proposal_expires_at = _expires_at()
        target.proposed_by_actor = author.actor
        target.proposal_message = author.message
        target.updated_at = now
        target.save()
        _audit(
            book=book,
            entry=target,
            kind=Kind.PROPOSED,
            author=author,
            change="replace",
            before=before,
            after=content,
        )
    else:
        target.text = content
        target.updated_at = now
        target.save()
        _audit(
            book=book,
            entry=target,
            kind=Kind.REPLACED,
            author=author,
            change="replace",
            before=before,
            after=content,
        )
    usage = book_usage(book)
    if pending:
        _announce(target)
        return Outcome(
            "pending",
            f"Change proposed in {book}: pending approval by {_approver(book)} — {usage}.",
            entry=target,
            usage=usage,
        )
    return Outcome("saved", f"Replaced in {book} — {usage}.", entry=target, usage=usage)


def _remove(book, entries, author: Author, target: MemoryEntry) -> Outcome:
    now = timezone.now()
    if target.status == Status.PENDING or not _needs_approval(book, author):
        # A proposal nobody approved yet can be withdrawn without review.
        before_status = target.status
        target.status, target.pending_change, target.updated_at = Status.REMOVED, "", now
        target.save()
        _audit(
            book=book,
            entry=target,
            kind=Kind.REMOVED,
            author=author,
            change="remove",
            before=target.text,
            detail={"withdrawn": before_status == Status.PENDING},
        )
        usage = book_usage(book, [entry for entry in entries if entry is not target])
        return Outcome("removed", f"Removed from {book} — {usage}.", entry=target, usage=usage)
    target.pending_change = Change.REMOVE
    target.proposed_text = ""
    target.proposed_at = now
    target.proposal_expires_at = _expires_at()
    target.proposed_by_actor = author.actor
    target.proposal_message = author.message
    target.updated_at = now
    target.save()
    _audit(
        book=book,
        entry=target,
        kind=Kind.PROPOSED,
        author=author,
        change="remove",
        before=target.text,
    )
    _announce(target)
    usage = book_usage(book, entries)
    return Outcome(
        "pending",
        f"Removal proposed in {book}: pending approval by {_approver(book)} — {usage}.",
        entry=target,
        usage=usage,
    )


def _approver(book: MemoryBook) -> str:
    if book.scope == Scope.USER:
        return book.subject_name
    if book.scope == Scope.TEAM:
        return "a reviewer"
    return "a chat owner or admin"


# --- Decisions by people -----------------------------------------------------------------


def memory_review(
    *,
    entry_id: int,
    decision: str,
    person=None,
    actor: Actor | None = None,
    text: str | None = None,
    via: str = MemoryEvent.Via.DASHBOARD,
) -> MemoryEntry:
    """Approve or reject the change waiting on an entry, as `person` (or channel `actor`).

    Only someone entitled (policy.may_review) decides; an outsider changes nothing. With
    `text`, an approval applies the edited text instead (scanned and budget-checked, the
    edit audited). Raises ReviewNotAllowed, ReviewConflict or ReviewInvalid."""
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
    others = [
        other
        for other in entry.book.entries.filter(status__in=LIVE).exclude(pk=entry.pk)
        if other.pk != entry.pk
    ]
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


def _clear_proposal(entry: MemoryEntry, now) -> None:
    entry.pending_change = Change.NONE
    entry.proposed_text = ""
    entry.proposal_expires_at = None
    entry.updated_at = now


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
    """Expire every proposal past its time (only those in `entry_ids` or `book`, if given):
    an addition becomes expired, a replacement or removal is dropped. Returns how many."""
    now = now or timezone.now()
    due = MemoryEntry.objects.exclude(pending_change="").filter(proposal_expires_at__lte=now)
    if entry_ids is not None:
        due = due.filter(pk__in=entry_ids)
    if book is not None:
        due = due.filter(book=book)
    count = 0
    for entry_id in due.values_list("pk", flat=True):
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
            _clear_proposal(entry, now)
            entry.save()
            count += 1
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
            if duplicate is not None:
                entry.status = Status.REMOVED
                _clear_proposal(entry, timezone.now())
            entry.save()
            existing.append(entry)
            moved += 1
        return moved
