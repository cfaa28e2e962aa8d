"""Reads of the learning loop's records. What a person sees is limited to the chats they
may read (`chats.selectors.chats_readable_by`); nothing here crosses that line.

A Review row says what ran and what it concluded; the proposals it made are reached through
`review.memory_entries` and `review.skill_proposals`, and their text must be shown through
the memory and skills rules (a pending fact is for its reviewers' eyes), not from here.
"""

from django.db.models import Count, QuerySet

from chats.models import Chat
from chats.selectors import chats_readable_by
from learning.models import ChatLearning, Review


def reviews_for_chat(chat: Chat, person) -> QuerySet[Review]:
    """The reviews of `chat`, newest first, with their turn and how many memory and skill
    proposals each made (`memory_proposal_count`, `skill_proposal_count`); empty unless
    `person` may read the chat."""
    if not chats_readable_by(person).filter(pk=chat.pk).exists():
        return Review.objects.none()
    return (
        Review.objects.filter(chat=chat)
        .select_related("turn")
        .annotate(
            memory_proposal_count=Count("memory_entries", distinct=True),
            skill_proposal_count=Count("skill_proposals", distinct=True),
        )
        .order_by("-created_at", "-id")
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
    return f"proposed by the review after turn {review.turn_number}"
