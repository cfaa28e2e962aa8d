"""Reads of the learning loop's records. What a person sees is limited to the chats they
may read (`chats.selectors.chats_readable_by`); nothing here crosses that line.

A Review row says what ran and what it concluded; the proposals it made are reached through
`review.memory_entries` and `review.skill_proposals`, and their text must be shown through
the memory and skills rules (a pending fact is for its reviewers' eyes), not from here.
"""

from dataclasses import dataclass

from django.db.models import Count, Prefetch, QuerySet
from django.utils import timezone

from chats.models import Chat, ChatMember
from chats.selectors import chats_readable_by
from learning.models import ChatLearning, Review


def _readable_reviews(chat: Chat, person) -> QuerySet[Review]:
    """The reviews of `chat`, newest first, with their turn; empty unless `person` may read
    the chat."""
    if not chats_readable_by(person).filter(pk=chat.pk).exists():
        return Review.objects.none()
    return Review.objects.filter(chat=chat).select_related("turn").order_by("-created_at", "-id")


def reviews_for_chat(chat: Chat, person) -> QuerySet[Review]:
    """The reviews of `chat`, newest first, with their turn and how many memory and skill
    proposals each made (`memory_proposal_count`, `skill_proposal_count`); empty unless
    `person` may read the chat."""
    return _readable_reviews(chat, person).annotate(
        memory_proposal_count=Count("memory_entries", distinct=True),
        skill_proposal_count=Count("skill_proposals", distinct=True),
    )


def review_for_person(person, review_id: int) -> Review | None:
    """One review of a chat `person` may read, with its chat and turn, else None (404)."""
    return (
        Review.objects.select_related("chat", "turn")
        .filter(pk=review_id, chat__in=chats_readable_by(person))
        .first()
    )


def chat_learning_for_person(person, chat: Chat) -> ChatLearning | None:
    """The counters and settings of `chat` (unsaved defaults before its first turn), or None
    when `person` may not read the chat."""
    if not chats_readable_by(person).filter(pk=chat.pk).exists():
        return None
    return ChatLearning.objects.filter(chat=chat).first() or ChatLearning(chat=chat)


def review_for_memory_entry(entry) -> Review | None:
    """The review that proposed the change waiting on (or last decided for) a memory entry,
    with its turn: "proposed by the review after turn N". None when a turn proposed it."""
    if entry.review_id is None:
        return None
    return Review.objects.select_related("turn").filter(pk=entry.review_id).first()


def review_for_skill_proposal(proposal) -> Review | None:
    """The review that made a skill proposal, with its turn, or None."""
    if proposal.review_id is None:
        return None
    return Review.objects.select_related("turn").filter(pk=proposal.review_id).first()


def review_origin_label(review: Review | None) -> str:
    """How a proposal names its origin: "proposed by the review after turn 12", or ""."""
    if review is None:
        return ""
    return review.origin_label


def chat_learning_may_change(person, chat: Chat) -> bool:
    """May `person` change the chat's review intervals and quiet notice? Its active owners and
    admins, and active staff; nobody else (anonymous and deactivated people never)."""
    if person is None or not person.is_authenticated or not person.is_active:
        return False
    if person.is_staff or person.is_superuser:
        return True
    managers = (ChatMember.Role.OWNER, ChatMember.Role.ADMIN)
    return ChatMember.objects.filter(chat=chat, person=person, role__in=managers).exists()


def reviews_with_proposals_for_chat(chat: Chat, person) -> QuerySet[Review]:
    """The reviews of `chat` (as `reviews_for_chat`, without the counts: the lists are here)
    with each review's memory entries (book and subject) and skill proposals (skill)
    prefetched: a page of reviews costs the same queries at any length. The entries' text is
    for `memory_proposals_shown` to give out, not for the caller."""
    from memory.models import MemoryEntry
    from skills.models import SkillProposal

    entries = MemoryEntry.objects.select_related(
        "book__chat", "book__person", "book__actor"
    ).order_by("id")
    proposals = SkillProposal.objects.select_related("skill").order_by("id")
    return _readable_reviews(chat, person).prefetch_related(
        Prefetch("memory_entries", queryset=entries),
        Prefetch("skill_proposals", queryset=proposals),
    )


@dataclass(frozen=True)
class ShownMemoryProposal:
    """A memory entry a review proposed, as one chat reader may see it."""

    entry: object  # memory.models.MemoryEntry, with its book
    state: str  # proposed, approved, rejected, expired, removed (a CSS label too)
    label: str  # what waits or what became of it, in words
    text: str | None  # None: not this person's to read
    proposed_text: str | None  # the new text of a replacement waiting, when theirs to read
    waiting: bool  # a change still waits for a decision
    may_decide: bool  # …and this person may decide it (on the Approvals page)


def memory_proposals_shown(entries, *, chat: Chat, person) -> list[ShownMemoryProposal]:
    """Memory entries proposed by reviews of `chat` (a reader of which `person` must be) with
    the text only where memory's rules let the person read it: a change waiting only for
    those who may decide it (`memory_reviewable`) and the person it is about, an approved
    entry where the chat's readers see it (`entry_shown`) or to the person it is about;
    rejected, expired and removed entries never. At most three queries for any number."""
    from memory.audience import chat_audience, entry_shown
    from memory.models import MemoryEntry
    from memory.selectors import memory_entry_ids_about, memory_reviewable

    entries = list(entries)
    if not entries:
        return []
    Status = MemoryEntry.Status
    ids = [entry.pk for entry in entries]
    decidable = set(memory_reviewable(person).filter(pk__in=ids).values_list("pk", flat=True))
    about_them = memory_entry_ids_about(person=person, ids=ids)
    audience = chat_audience(chat, person=person)
    now = timezone.now()
    shown: list[ShownMemoryProposal] = []
    for entry in entries:
        expired = bool(entry.pending_change) and (
            entry.proposal_expires_at is not None and entry.proposal_expires_at <= now
        )
        waiting = bool(entry.pending_change) and not expired
        may_decide = waiting and entry.pk in decidable
        own = entry.pk in about_them
        readable = (
            may_decide or own or (entry.status == Status.ACTIVE and entry_shown(audience, entry))
        )
        if expired or entry.status == Status.EXPIRED:
            state, label = "expired", "expired undecided"
        elif entry.pending_change == "add":
            state, label = "proposed", "proposed"
        elif entry.pending_change == "replace":
            state, label = "proposed", "change proposed"
        elif entry.pending_change == "remove":
            state, label = "proposed", "removal proposed"
        else:
            state, label = entry.status, entry.get_status_display().lower()
        if entry.status == Status.ACTIVE and not entry.pending_change:
            state = "approved"
        shown.append(
            ShownMemoryProposal(
                entry=entry,
                state=state,
                label=label,
                text=entry.text if readable and not expired else None,
                proposed_text=(
                    entry.proposed_text
                    if waiting and entry.pending_change == "replace" and (may_decide or own)
                    else None
                ),
                waiting=waiting,
                may_decide=may_decide,
            )
        )
    return shown


def skill_proposals_decidable_by(person) -> bool:
    """May `person` decide skill proposals (a skill reviewer)? Then a waiting one links to
    the Approvals page."""
    from skills.policy import may_review

    return may_review(person)
