"""Reads of team knowledge that a person or a chat triggers. The collections searched always
come from knowledge.access: a person's readable ones, or those on in a chat whose readers
may all read them; nothing here takes collection ids from input alone."""

from django.contrib.auth.models import AbstractBaseUser

from chats.models import Actor, Chat
from knowledge.access import collections_for_turn, collections_readable_by
from knowledge.models import Collection, Passage, place_label
from knowledge.search import hybrid_search, passages_for


def search_for_person(
    person: AbstractBaseUser | None,
    query: str,
    *,
    collection: Collection | None = None,
    limit: int = 10,
) -> list[Passage]:
    """The best passages for `query` among the collections `person` may read (or the one
    `collection`, only if they may read it): empty for anyone else."""
    readable = collections_readable_by(person)
    if collection is not None:
        readable = readable.filter(pk=collection.pk)
    ids = list(readable.values_list("pk", flat=True))
    return passages_for(hybrid_search(query, ids, limit=limit))


def search_for_chat(
    chat: Chat, query: str, *, actor: Actor | None = None, limit: int = 5
) -> list[Passage]:
    """The best passages for `query` among the collections on in `chat` that every reader of
    the chat may read now (knowledge.access.collections_for_turn)."""
    ids = [c.pk for c in collections_for_turn(chat, actor=actor)]
    return passages_for(hybrid_search(query, ids, limit=limit))


def citation(passage: Passage) -> str:
    """How a passage is cited: collection / document § section (p. N)."""
    place = place_label(passage.document.path, passage.section, passage.page)
    return f"{passage.collection.name} / {place}"
