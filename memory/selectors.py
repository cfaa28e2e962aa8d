"""Reads of memory: what a prompt may show, what a person may review, what is held about whom."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from django.utils import timezone

from chats.models import Actor, Chat, ChatMember, Message
from chats.rows import fetch_prepared
from memory.audience import chat_audience, readers_may_see
from memory.models import MemoryBook, MemoryEntry, MemoryEvent, Scope

Status = MemoryEntry.Status
LIVE = (Status.ACTIVE, Status.PENDING)


def _about_q(*, person=None, actor: Actor | None = None) -> Q:
    if person is None and actor is not None and actor.person_id is not None:
        person = actor.person
    if person is not None:
        return Q(book__scope=Scope.USER) & (Q(book__person=person) | Q(book__actor__person=person))
    if actor is not None:
        return Q(book__scope=Scope.USER, book__actor=actor)
    return Q(pk__in=[])


def memory_entries_about(*, person=None, actor: Actor | None = None) -> list[MemoryEntry]:
    """Approved and pending entries about this person (or unlinked actor), oldest first."""
    return list(
        MemoryEntry.objects.filter(_about_q(person=person, actor=actor), status__in=LIVE)
        .select_related("book", "source_chat", "author_actor")
        .order_by("created_at", "id")
    )


def memory_entry_ids_about(*, person, ids) -> set[int]:
    """Which of the entries `ids` are approved or pending entries about `person` (one query,
    by the same rule as `memory_entries_about`)."""
    entries = MemoryEntry.objects.filter(_about_q(person=person), status__in=LIVE, pk__in=ids)
    return set(entries.values_list("pk", flat=True))


def memory_reviewable(person) -> QuerySet[MemoryEntry]:
    """Entries with a change waiting that `person` may decide, not yet expired, oldest first."""
    if person is None or not person.is_authenticated or not person.is_active:
        return MemoryEntry.objects.none()
    allowed = _about_q(person=person)
    if person.is_staff or person.is_superuser:
        allowed |= Q(book__scope__in=[Scope.TEAM, Scope.CHAT])
    else:
        admin_of = ChatMember.objects.filter(
            person=person, role__in=[ChatMember.Role.OWNER, ChatMember.Role.ADMIN]
        ).values("chat_id")
        allowed |= Q(book__scope=Scope.CHAT, book__chat_id__in=admin_of)
    return (
        MemoryEntry.objects.filter(allowed)
        .exclude(pending_change="")
        .filter(Q(proposal_expires_at__isnull=True) | Q(proposal_expires_at__gt=timezone.now()))
        .select_related(
            "book__chat",
            "book__person",
            "book__actor",
            "proposed_by_actor",
            "proposal_message__chat",
            "source_chat",
        )
        .order_by("proposed_at", "id")
    )


def memory_pending_count(person) -> int:
    """How many decisions wait for `person` (the badge in the navigation)."""
    return memory_reviewable(person).count()


def memory_review_recipients(*, entry: MemoryEntry, channel: str) -> list[Actor]:
    """Actors on `channel` entitled to decide `entry`: the subject for user entries, linked
    staff for team entries, linked chat owners/admins and staff for chat entries."""
    book = entry.book
    if book.scope == Scope.USER:
        if book.person_id is not None:
            return list(Actor.objects.filter(channel=channel, person_id=book.person_id))
        if book.actor.channel == channel:
            return [book.actor]
        if book.actor.person_id is not None:
            return list(Actor.objects.filter(channel=channel, person_id=book.actor.person_id))
        return []
    staff = get_user_model().objects.filter(Q(is_staff=True) | Q(is_superuser=True))
    people = Q(person__in=staff.filter(is_active=True))
    if book.scope == Scope.CHAT:
        admins = ChatMember.objects.filter(
            chat_id=book.chat_id, role__in=[ChatMember.Role.OWNER, ChatMember.Role.ADMIN]
        ).values("person_id")
        people |= Q(person_id__in=admins, person__is_active=True)
    return list(Actor.objects.filter(people, channel=channel).order_by("id"))


@dataclass(frozen=True)
class PromptBook:
    """One book as a prompt shows it: approved texts in order, and the book's usage."""

    book: MemoryBook
    texts: list[str]
    used: int  # live characters (approved + pending), as the budget counts them


@dataclass(frozen=True)
class PromptMemory:
    """The approved entries one turn may see, per scope (None: nothing to show)."""

    team: PromptBook | None
    chat: PromptBook | None
    user: PromptBook | None


def memory_maybe_in_prompt(*, chat: Chat, person=None, actor: Actor | None = None) -> bool:
    """False only when `memory_for_prompt` shows nothing: no approved entry in the team's
    book, this chat's or the author's own (by person or by actor). Asked first on every turn,
    so it is one statement written once (no queryset compiled) and always current: nothing
    is cached, so an approval or a removal counts from the next turn on."""
    if person is None and actor is not None:
        person_id = actor.person_id
    else:
        person_id = getattr(person, "pk", None)
    params = [Status.ACTIVE, Scope.TEAM, Scope.CHAT, chat.pk, Scope.USER, person_id]
    params.append(actor.pk if actor is not None else None)
    return bool(fetch_prepared("memory_maybe_in_prompt", _maybe_in_prompt_sql, params))


def _maybe_in_prompt_sql(quote) -> str:
    entry, book = MemoryEntry._meta, MemoryBook._meta

    def column(meta, name: str) -> str:
        return f"{quote(meta.db_table)}.{quote(meta.get_field(name).column)}"

    return (
        f"SELECT 1 FROM {quote(entry.db_table)} INNER JOIN {quote(book.db_table)} "
        f"ON ({column(entry, 'book')} = {column(book, 'id')}) "
        f"WHERE {column(entry, 'status')} = %s AND ({column(book, 'scope')} = %s "
        f"OR ({column(book, 'scope')} = %s AND {column(book, 'chat')} = %s) "
        f"OR ({column(book, 'scope')} = %s AND ({column(book, 'person')} = %s "
        f"OR {column(book, 'actor')} = %s))) LIMIT 1"
    )


def memory_for_prompt(*, chat: Chat, person=None, actor: Actor | None = None) -> PromptMemory:
    """Approved team entries, this chat's, and the trigger author's own, each only where
    `readers_may_see` allows it (private ones only in the author's own chats). Pending
    proposals never appear. Two queries, plus one in a DM, terminal or API chat."""
    books = {
        book.pk: book
        for book in MemoryBook.objects.filter(
            Q(scope=Scope.TEAM) | Q(scope=Scope.CHAT, chat=chat) | _user_book_q(person, actor)
        ).select_related("chat", "person", "actor")
    }
    if not books:
        return PromptMemory(None, None, None)
    audience = chat_audience(chat, person=person, actor=actor)
    texts: dict[int, list[str]] = {pk: [] for pk in books}
    used: dict[int, int] = dict.fromkeys(books, 0)
    rows = (
        MemoryEntry.objects.filter(book_id__in=list(books), status__in=LIVE)
        .order_by("created_at", "id")
        .values_list("book_id", "status", "visibility", "text", "pending_change", "proposed_text")
    )
    for book_id, status, visibility, text, change, proposed in rows:
        # The same arithmetic as services.entry_cost, without building model instances.
        used[book_id] += max(len(text), len(proposed)) if change == "replace" else len(text)
        # Pending rows carry no proposer here, so readers_may_see never shows them.
        if readers_may_see(audience, books[book_id], status=status, visibility=visibility):
            texts[book_id].append(text)

    def pick(scope: str) -> PromptBook | None:
        for pk, book in books.items():
            if book.scope == scope and texts[pk]:
                return PromptBook(book, texts[pk], used[pk])
        return None

    return PromptMemory(team=pick(Scope.TEAM), chat=pick(Scope.CHAT), user=pick(Scope.USER))


def _user_book_q(person, actor: Actor | None) -> Q:
    if person is None and actor is not None and actor.person_id is not None:
        person = actor.person
    if person is not None:
        return Q(scope=Scope.USER, person=person)
    if actor is not None:
        return Q(scope=Scope.USER, actor=actor)
    return Q(pk__in=[])


def chat_participants(chat: Chat) -> list[Actor]:
    """Actors who wrote in `chat`, plus the web actors of its members, by display name."""
    actor_ids = set(
        Message.objects.filter(chat=chat, role=Message.Role.USER, actor__isnull=False)
        .values_list("actor_id", flat=True)
        .distinct()
    )
    members = ChatMember.objects.filter(chat=chat).values("person_id")
    actors = Actor.objects.filter(Q(pk__in=actor_ids) | Q(person_id__in=members)).select_related(
        "person"
    )
    return sorted(actors, key=lambda actor: (actor.display_name.casefold(), actor.pk))


def memory_conflict_reason(entry_id: int) -> tuple[str, str]:
    """Why a proposal the person may decide has nothing left to decide: ("expired" or
    "conflict", the words to show)."""
    entry = MemoryEntry.objects.filter(pk=entry_id).first()
    last = entry.events.order_by("-created_at", "-id").first() if entry else None
    if last is not None and last.kind == MemoryEvent.Kind.EXPIRED:
        return "expired", "This proposal expired before it was decided; nothing changed."
    if entry is not None:
        status = entry.get_status_display().lower()
        return "conflict", f"This proposal was already decided ({status}); nothing changed."
    return "conflict", "This proposal was already decided; nothing changed."
