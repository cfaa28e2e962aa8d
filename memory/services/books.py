"""What every write to memory stands on: the statuses, the errors a decision can meet, a
scope's book and its budget, who asked for a change (Author) and what came of it (Outcome),
and the audit event each change writes in its own transaction.

Shared by the agent's proposals (memory.services.proposals), the housekeeping
(memory.services.housekeeping) and people's decisions (memory.reviews).
"""

from dataclasses import dataclass, field

from django.db import IntegrityError

from chats.agent.registry import ORIGIN_CHAT
from chats.models import Actor, Chat, Message
from memory.models import MemoryBook, MemoryEntry, MemoryEvent, Scope

Status = MemoryEntry.Status
Change = MemoryEntry.Change
Kind = MemoryEvent.Kind
LIVE = (Status.ACTIVE, Status.PENDING)
MAX_AUDIT_TEXT = 4000


class ReviewNotAllowed(PermissionError):
    """The person (or actor) may not decide this entry."""


class ReviewConflict(Exception):
    """The entry has nothing waiting for a decision any more (decided, expired, gone)."""


STALE_MESSAGE = "This proposal changed after you saw it: review the new text"


class ReviewStale(ReviewConflict):
    """The proposal changed after the reviewer saw it (another revision); nothing changed."""

    def __init__(self, message: str = STALE_MESSAGE):
        super().__init__(message)


class ReviewInvalid(ValueError):
    """An edit made while approving was refused (scanner or budget); nothing changed."""


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


@dataclass(frozen=True)
class Author:
    """Who asked for a change, and where: the turn's trigger in an agent write."""

    actor: Actor | None = None
    person: object = None
    chat: Chat | None = None
    message: Message | None = None
    via: str = MemoryEvent.Via.AGENT
    asked: bool = False  # the subject explicitly asked for this change in this turn
    origin: str = ORIGIN_CHAT  # ORIGIN_REVIEW: a background review, whose writes always wait
    review_id: int | None = None  # that review (linked from the proposal)
    # What the change drew on besides messages' text (files: chats.work_sources); it decides
    # where the change may land (memory.sources) and is kept on the entry and its events.
    sources: tuple = ()


@dataclass
class Outcome:
    """What a proposal did, in words the model can act on."""

    code: str  # saved, pending, removed, duplicate, overflow, ambiguous, not_found, blocked,
    # busy (a change waits on it), not_yours (someone else's proposal), invalid
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
        detail=_with_sources(detail, author),
    )


def _with_sources(detail: dict | None, author: Author | None) -> dict:
    """An event's detail, with the files the change drew on when it drew on any: by id only
    (the audit is shown in the admin to staff, who may not read the file's chat)."""
    detail = dict(detail or {})
    if author is not None and author.sources:
        detail["sources"] = [
            {"kind": source.get("kind"), "id": source.get("id")} for source in author.sources
        ]
    return detail


def _touch(entry: MemoryEntry, now) -> None:
    entry.updated_at = now
    entry.revision += 1


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


def _clear_proposal(entry: MemoryEntry, now) -> None:
    entry.pending_change = Change.NONE
    entry.proposed_text = ""
    entry.proposal_expires_at = None
    _touch(entry, now)
