"""Who reads a chat, and the one decision "may the readers of this chat see this entry".

Both the memory block of the system prompt and the memory tool's results go through
`readers_may_see`, so what the model is told and what a tool message (stored in the chat's
history, readable by every member) can show never drift apart.

A chat is **private** to its author only when that person is its one reader: their Telegram
DM, their terminal profile (a chat of kind DM, CLI or API with no other member). Every
group, forum topic and web room is **shared**, whatever its member count today: anyone can be
added to a room later and would then read its history, tool results included. So is an
integration's API conversation: its token's owner is a member and reads it, and the speaker
is the integration's user, never that person. The test itself is
`chats.selectors.chat_private_to`, the one home of "private" (skills, tools, schedules and
the engine's `session_search` ask it too).
"""

from dataclasses import dataclass

from chats.models import Actor, Chat
from chats.selectors import chat_private_to
from memory.models import MemoryBook, MemoryEntry, Scope, Visibility

Status = MemoryEntry.Status


@dataclass(frozen=True)
class Audience:
    """The readers of one chat as memory sees them, and who wrote the current message."""

    chat: Chat
    shared: bool
    person: object = None  # the author of the current message (a Person), if known
    actor: Actor | None = None

    def is_only_reader(self, book: MemoryBook) -> bool:
        """Is the person `book` is about the one and only reader of this chat?"""
        if self.shared or book.scope != Scope.USER:
            return False
        person_id = getattr(self.person, "pk", None)
        if book.person_id is not None:
            return person_id is not None and book.person_id == person_id
        if self.actor is not None and book.actor_id == self.actor.pk:
            return True
        return person_id is not None and book.actor.person_id == person_id

    def proposed_here(self, *, chat_id, person_id, actor_id) -> bool:
        """Was a proposal made in this chat by the author of the current message? That is the
        proposer's side: the only one that may see, revise or withdraw it through the tool."""
        if chat_id is None or chat_id != self.chat.pk:
            return False
        if person_id is not None:
            return person_id == getattr(self.person, "pk", None)
        return actor_id is not None and self.actor is not None and actor_id == self.actor.pk


def chat_audience(chat: Chat, *, person=None, actor: Actor | None = None) -> Audience:
    """The audience of `chat` for a turn by `person`/`actor`: private only in a DM, terminal or
    API chat of theirs that nobody else is a member of (never an integration's API chat,
    whose token owner is a member)."""
    if person is None and actor is not None and actor.person_id is not None:
        person = actor.person
    private = chat_private_to(chat, person=person, actor=actor)
    return Audience(chat=chat, shared=not private, person=person, actor=actor)


def readers_may_see(
    audience: Audience,
    book: MemoryBook,
    *,
    status: str,
    visibility: str,
    proposal_chat_id=None,
    proposer_person_id=None,
    proposer_actor_id=None,
) -> bool:
    """May every reader of the audience's chat see this entry (as the prompt or a tool result)?

    Approved entries: team ones everywhere, a chat's only in that chat, a person's shared ones
    everywhere and their private ones only where that person is the one reader. A pending
    addition only to the proposer's side, in the chat it was proposed in. Nothing else."""
    if status == Status.PENDING:
        if not audience.proposed_here(
            chat_id=proposal_chat_id, person_id=proposer_person_id, actor_id=proposer_actor_id
        ):
            return False
    elif status != Status.ACTIVE:
        return False
    if book.scope == Scope.TEAM:
        return True
    if book.scope == Scope.CHAT:
        return book.chat_id == audience.chat.pk
    if visibility == Visibility.SHARED:
        return True
    return audience.is_only_reader(book)


def entry_shown(audience: Audience, entry: MemoryEntry) -> bool:
    """`readers_may_see` for a loaded entry."""
    return readers_may_see(
        audience,
        entry.book,
        status=entry.status,
        visibility=entry.visibility,
        proposal_chat_id=entry.proposal_chat_id,
        proposer_person_id=entry.proposed_by_person_id,
        proposer_actor_id=entry.proposed_by_actor_id,
    )


def proposal_shown(audience: Audience, entry: MemoryEntry) -> bool:
    """May the proposed change waiting on a shown entry (its new text) be shown too? Only to
    the proposer's side."""
    return bool(entry.pending_change) and audience.proposed_here(
        chat_id=entry.proposal_chat_id,
        person_id=entry.proposed_by_person_id,
        actor_id=entry.proposed_by_actor_id,
    )
