"""Proposals from the agent: add, replace or remove one entry of a book (`memory_propose`).

Nothing is stored before the scanner passed it, and a book never holds more than its budget
of live text (approved entries plus pending additions), even when two writes race: every
change happens under a row lock on the book, with its audit event in the same transaction.
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chats.agent.registry import ORIGIN_REVIEW
from hermes_site.scanning import scan_book, scan_text
from memory import policy
from memory.audience import Audience, chat_audience, entry_shown, proposal_shown, readers_may_see
from memory.models import MemoryBook, MemoryEntry, MemoryEvent, Scope, Visibility
from memory.services.books import (
    LIVE,
    Author,
    Change,
    Kind,
    Outcome,
    Status,
    _audit,
    _duplicate_of,
    _key,
    _touch,
    book_usage,
    entry_cost,
    normalise_text,
)
from memory.services.housekeeping import memory_expire_proposals
from memory.signals import proposal_created
from memory.sources import file_source_refusal, merged_sources

logger = logging.getLogger(__name__)


def _lock(book: MemoryBook) -> list[MemoryEntry]:
    MemoryBook.objects.select_for_update().filter(pk=book.pk).first()
    return list(book.entries.filter(status__in=LIVE).order_by("id"))


def _line(entry: MemoryEntry, audience: Audience | None) -> str:
    """An entry as a tool result may show it: a change someone else proposed stays unseen."""
    if audience is None or not entry.pending_change or proposal_shown(audience, entry):
        return entry.summary_line()
    return entry.text


def _listing(entries: list[MemoryEntry], audience: Audience | None = None) -> str:
    if not entries:
        return "(no entries)"
    return "\n".join(f"{n}. {_line(entry, audience)}" for n, entry in enumerate(entries, 1))


def _person_of(author: Author):
    if author.person is not None:
        return author.person
    if author.actor is not None and author.actor.person_id is not None:
        return author.actor.person
    return None


def _own_chat(book: MemoryBook, author: Author, audience: Audience | None) -> bool:
    """Is the subject of `book` the one reader of the chat the author wrote in? A write with
    no chat (a command, a test, the admin) has no other readers."""
    if audience is None:
        if author.chat is None:
            return True
        audience = chat_audience(author.chat, person=_person_of(author), actor=author.actor)
    return audience.is_only_reader(book)


def _needs_approval(
    book: MemoryBook, author: Author, *, visibility: str = "", audience: Audience | None = None
) -> bool:
    """Team and chat entries follow their scope's policy. A person's entry is applied at once
    only when that person explicitly asked for it (`author.asked`), it stays private, and
    they are the one reader of the chat they asked in; the agent never widens visibility
    (a shared entry always waits for the person), whatever the policy."""
    if author.origin == ORIGIN_REVIEW:
        return True  # a review only proposes, whatever the policy
    rule = policy.approval_policy(book.scope)
    if book.scope != Scope.USER:
        return rule != "auto"
    if visibility == Visibility.SHARED and author.via == MemoryEvent.Via.AGENT:
        return True
    if rule == "auto":
        return False
    subject_asked = author.asked and policy.book_is_about(
        book, person=_person_of(author), actor=author.actor
    )
    return not (
        subject_asked and visibility != Visibility.SHARED and _own_chat(book, author, audience)
    )


def _proposers_side(entry: MemoryEntry, author: Author) -> bool:
    """Is `author` the side that proposed the change waiting on `entry`: the same person (or
    the same actor, without one) in the same chat? Only that side revises or withdraws it."""
    if author.origin == ORIGIN_REVIEW:
        return False  # a review is nobody's side: it never revises or withdraws a proposal
    chat_id = author.chat.pk if author.chat is not None else None
    if entry.proposal_chat_id != chat_id:
        return False
    person = _person_of(author)
    if entry.proposed_by_person_id is not None:
        return person is not None and person.pk == entry.proposed_by_person_id
    return author.actor is not None and entry.proposed_by_actor_id == author.actor.pk


def _propose_fields(author: Author, now) -> dict:
    person = _person_of(author)
    return {
        "proposed_at": now,
        "proposal_expires_at": _expires_at(),
        "proposed_by_actor": author.actor,
        "proposed_by_person": person,
        "proposal_chat": author.chat,
        "proposal_message": author.message,
        "review_id": author.review_id,
    }


def _announce(entry: MemoryEntry) -> None:
    def send() -> None:
        try:
            proposal_created.send(sender=MemoryEntry, entry=entry)
        except Exception:  # a notifier's failure must not undo or hide the proposal
            logger.exception("a proposal_created receiver failed for entry %s", entry.pk)

    transaction.on_commit(send)


def _expires_at():
    return timezone.now() + timedelta(days=settings.MEMORY_PROPOSAL_TTL_DAYS)


def _blocked(
    book: MemoryBook, author: Author, change: str, text: str, result, *, in_book: bool = False
) -> Outcome:
    with transaction.atomic():
        _audit(
            book=book,
            entry=None,
            kind=Kind.BLOCKED,
            author=author,
            change=change,
            after=text,
            detail={
                "findings": [finding.category for finding in result.findings],
                "in_book": in_book,
            },
        )
    if in_book:
        # The excerpt could quote other entries, some not for this chat: categories only.
        categories = ", ".join(sorted({finding.category for finding in result.findings}))
        reason = (
            f"together with the entries already in {book}, this text would read as {categories}."
        )
    else:
        reason = result.summary()
    return Outcome(
        "blocked",
        f"Blocked, nothing was stored: {reason} Memory holds declarative facts "
        "only; never instructions, hidden characters, secrets or commands that send data out.",
        findings=list(result.findings),
    )


def book_text_after(
    entries: list[MemoryEntry], content: str, replacing: MemoryEntry | None = None
) -> tuple[list[str], int]:
    """The texts of a book in prompt order as it would read once this change and every
    waiting proposal are approved (both texts of another pending replacement, since either
    may end up in force), and the index of the changed text: for `scan_book`."""
    texts: list[str] = []
    changed = None
    for entry in entries:
        if entry is replacing:
            changed = len(texts)
            texts.append(content)
            continue
        texts.append(entry.text)
        if entry.pending_change == Change.REPLACE:
            texts.append(entry.proposed_text)
    if changed is None:
        changed = len(texts)
        texts.append(content)
    return texts, changed


def scan_book_after(entries: list[MemoryEntry], content: str, replacing=None):
    """Scan the book as it would read with `content` added (or in place of `replacing`);
    only findings touching the new text count, so old entries never block later writes."""
    texts, changed = book_text_after(entries, content, replacing)
    return scan_book(texts, changed=changed, kind="memory")


def memory_propose(
    *,
    book: MemoryBook,
    change: str,
    author: Author,
    content: str = "",
    match: str = "",
    visibility: str = "",
    audience: Audience | None = None,
) -> Outcome:
    """Propose `add`, `replace` (the one entry containing `match`) or `remove` in `book`.

    Scans the new text, then the book as it would read after the change (a blocked write
    stores nothing and is audited); refuses duplicates, ambiguous or unknown targets and
    anything past the budget; stores the change as pending, or applies it when the policy
    or the subject's own request allows. With an `audience` (the memory tool), only entries
    its readers may see exist: results never show, and targets never reach, anything else."""
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
    refusal = file_source_refusal(book, author, change=change, visibility=visibility)
    if refusal:
        return Outcome("invalid", refusal)
    memory_expire_proposals(book=book)  # an expired proposal no longer takes budget

    with transaction.atomic():
        entries = _lock(book)
        for entry in entries:
            entry.book = book
        shown = entries if audience is None else [e for e in entries if entry_shown(audience, e)]
        usage = book_usage(book, entries)
        if change == Change.ADD:
            result = scan_book_after(entries, content)
            if not result.allowed:
                return _blocked(book, author, change, content, result, in_book=True)
            return _add(book, shown, usage, author, content, visibility, audience)
        targets = _find(shown, match)
        if not targets:
            if _find([e for e in entries if _contested(e, author, audience)], match):
                return Outcome(
                    "not_yours",
                    "Error: that entry is a proposal someone else made, waiting for review; "
                    "only its proposer or a reviewer may change it. Nothing changed.",
                    usage=usage,
                )
            return Outcome(
                "not_found",
                f"Error: no entry in {book} contains {match!r}; nothing changed. "
                f"Entries ({usage}):\n{_listing(shown, audience)}",
                usage=usage,
            )
        if len(targets) > 1:
            return Outcome(
                "ambiguous",
                f"Error: {match!r} matches {len(targets)} entries in {book}; nothing changed. "
                f"Quote more of the one you mean:\n{_listing(targets, audience)}",
                usage=usage,
            )
        target = targets[0]
        mine = _proposers_side(target, author)
        if target.pending_change and not mine:
            pending_add = target.status == Status.PENDING
            waiting = (
                "a proposal someone else made" if pending_add else "a change someone else proposed"
            )
            return Outcome(
                "busy",
                f"Error: this entry has {waiting}, waiting for review; only its proposer or "
                "a reviewer may change it. Nothing changed.",
                usage=usage,
            )
        if (
            target.status == Status.ACTIVE
            and target.pending_change
            and not (change == Change.REPLACE and target.pending_change == Change.REPLACE)
        ):
            return Outcome(
                "busy",
                f"Error: a change to this entry already waits for approval "
                f"({target.summary_line()}); nothing changed.",
                usage=usage,
            )
        if change == Change.REPLACE:
            result = scan_book_after(entries, content, replacing=target)
            if not result.allowed:
                return _blocked(book, author, change, content, result, in_book=True)
            return _replace(book, shown, usage, author, target, content, audience)
        return _remove(book, entries, author, target, audience)


def _contested(entry: MemoryEntry, author: Author, audience: Audience | None) -> bool:
    """A proposal made in this chat by someone else, that this chat could see once approved:
    the tool says whose it is instead of "no match" (its words are already in this chat)."""
    if audience is None or entry.status != Status.PENDING or _proposers_side(entry, author):
        return False
    if entry.proposal_chat_id != audience.chat.pk:
        return False
    return readers_may_see(audience, entry.book, status=Status.ACTIVE, visibility=entry.visibility)


def _find(entries: list[MemoryEntry], match: str) -> list[MemoryEntry]:
    exact = [entry for entry in entries if match in entry.text]
    if exact:
        return exact
    folded = _key(match)
    return [entry for entry in entries if folded and folded in _key(entry.text)]


def _overflow(book, shown, usage, needed: int, audience) -> Outcome:
    return Outcome(
        "overflow",
        f"Error: {book} is full: {usage.used:,} of {usage.budget:,} chars used "
        f"(approved + pending), and this needs {needed:,} more. Nothing was stored. "
        f"Consolidate first: replace several entries with one shorter entry, or remove "
        f"stale ones, then retry.\nCurrent entries:\n{_listing(shown, audience)}",
        usage=usage,
    )


def _add(book, shown, usage, author: Author, content, visibility, audience) -> Outcome:
    # Duplicates only among what this chat may see: "already there" about a hidden entry
    # would confirm a private fact to whoever guessed it.
    duplicate = _duplicate_of(shown, content)
    if duplicate is not None:
        return Outcome(
            "duplicate",
            f"Already in {book} ({_line(duplicate, audience)}); not stored twice. Usage {usage}.",
            entry=duplicate,
            usage=usage,
        )
    if usage.used + len(content) > usage.budget:
        return _overflow(book, shown, usage, len(content), audience)
    now = timezone.now()
    pending = _needs_approval(book, author, visibility=visibility, audience=audience)
    proposal = _propose_fields(author, now)
    if not pending:
        proposal["proposal_expires_at"] = None
    entry = MemoryEntry.objects.create(
        book=book,
        text=content,
        visibility=visibility,
        status=Status.PENDING if pending else Status.ACTIVE,
        pending_change=Change.ADD if pending else Change.NONE,
        **proposal,
        author_actor=author.actor,
        author_person=author.person,
        source_chat=author.chat,
        source_message=author.message,
        sources=merged_sources([], author.sources),
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


def _replace(book, shown, usage, author: Author, target, content, audience) -> Outcome:
    if _key(content) == _key(target.text):
        return Outcome(
            "duplicate",
            f"The entry already says that; nothing changed. Usage {usage}.",
            usage=usage,
        )
    duplicate = _duplicate_of(shown, content, skip=target)
    if duplicate is not None:
        return Outcome(
            "duplicate",
            f"Another entry already says that ({_line(duplicate, audience)}); nothing "
            f"changed. Remove this one instead if it is stale. Usage {usage}.",
            usage=usage,
        )
    growth = len(content) - entry_cost(target)
    if growth > 0 and usage.used + growth > usage.budget:
        return _overflow(book, shown, usage, growth, audience)
    now = timezone.now()
    pending = _needs_approval(book, author, visibility=target.visibility, audience=audience)
    # The entry keeps every file a change to it drew on, decided or not: it may say what
    # the file said, so it never moves past the file's readers (memory.sources).
    target.sources = merged_sources(target.sources, author.sources)
    if target.pending_change:
        # Still a proposal, revised by its own side: the story records who revised it, the
        # revision moves on so a decision taken on the older text is refused, and it waits
        # for (or, when the subject asked, gets) approval again.
        replacing = target.pending_change == Change.REPLACE
        before = target.proposed_text if replacing else target.text
        if replacing:
            target.proposed_text = content
        else:
            target.text = content
        _touch(target, now)
        target.proposal_expires_at = _expires_at()
        target.proposal_message = author.message
        if not pending:
            if replacing:
                target.text = content
            else:
                target.status, target.approved_at = Status.ACTIVE, now
            target.pending_change, target.proposed_text = Change.NONE, ""
            target.proposal_expires_at = None
        target.save()
        change = "replace" if replacing else "add"
        _audit(
            book=book,
            entry=target,
            kind=Kind.EDITED,
            author=author,
            change=change,
            before=before,
            after=content,
            detail={"revision": target.revision, "by": "proposer"},
        )
        if not pending:
            _audit(book=book, entry=target, kind=Kind.AUTO_APPROVED, author=author, change=change)
    elif pending:
        before = target.text
        target.pending_change = Change.REPLACE
        target.proposed_text = content
        for name, value in _propose_fields(author, now).items():
            setattr(target, name, value)
        _touch(target, now)
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
        before = target.text
        target.text = content
        _touch(target, now)
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


def _remove(book, entries, author: Author, target, audience) -> Outcome:
    now = timezone.now()
    withdrawn = target.status == Status.PENDING  # only its own side gets here
    # A removal widens nothing: the visibility rule does not apply, the rest does.
    if withdrawn or not _needs_approval(book, author, audience=audience):
        # A proposal nobody approved yet can be withdrawn by its proposer without review.
        target.status, target.pending_change = Status.REMOVED, ""
        target.proposal_expires_at = None
        _touch(target, now)
        target.save()
        _audit(
            book=book,
            entry=target,
            kind=Kind.REMOVED,
            author=author,
            change="remove",
            before=target.text,
            detail={"withdrawn": withdrawn},
        )
        usage = book_usage(book, [entry for entry in entries if entry is not target])
        return Outcome("removed", f"Removed from {book} — {usage}.", entry=target, usage=usage)
    target.pending_change = Change.REMOVE
    target.proposed_text = ""
    for name, value in _propose_fields(author, now).items():
        setattr(target, name, value)
    _touch(target, now)
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
