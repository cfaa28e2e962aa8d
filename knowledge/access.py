"""The readers rule of team knowledge: who may read a collection, and in which chats its
passages may appear (docs/SECURITY.md#team-knowledge).

Nobody ever reads a passage of a collection they may not read. What enters a chat (a tool
result, a passage offered in the prompt, a citation) is stored in its history, which every
member reads, later members too. So a **restricted** collection (not everyone may read it)
is used in a chat only while everyone who reads that chat is its reader:

- every member of the chat is an active person who may read it;
- every author who has spoken there (and the author of the current message) is linked to
  such a person: an unlinked Telegram user or an API integration's end user is nobody's
  reader;
- never in a Telegram group or forum topic, whose readers the hub does not know;
- and while it is on, nobody who may not read it can be added to the chat (knowledge.signals
  refuses the membership).

This is checked when a decider turns it on *and* every time a passage would be shown (a
reader removed from the collection later, a member added around the guard): a chat that
fails the check gets nothing from the collection. Collections everyone may read are used in
every chat they are on in, like team memory.
"""

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from chats.models import Actor, Channel, Chat, ChatKind, ChatMember, Message
from chats.rows import fetch_prepared
from knowledge.models import ChatCollection, Collection

DECIDER_ROLES = (ChatMember.Role.OWNER, ChatMember.Role.ADMIN)
# Chats whose readers are a platform's, not the hub's: it cannot know they are all readers.
_UNKNOWN_READERS = {(Channel.TELEGRAM, ChatKind.GROUP), (Channel.TELEGRAM, ChatKind.TOPIC)}


def _active(person) -> bool:
    return (
        person is not None
        and getattr(person, "is_authenticated", False)
        and getattr(person, "is_active", False)
    )


def collections_readable_by(person: AbstractBaseUser | None) -> QuerySet[Collection]:
    """The collections `person` (as stored now) may read: open ones, and those they read or
    maintain. None for anyone inactive or anonymous."""
    if not _active(person):
        return Collection.objects.none()
    return Collection.objects.filter(
        Q(everyone_may_read=True) | Q(readers=person) | Q(maintainers=person)
    ).distinct()


def may_read(person: AbstractBaseUser | None, collection: Collection) -> bool:
    """May `person` read the passages of `collection`?"""
    if not _active(person):
        return False
    if collection.everyone_may_read:
        return True
    return (
        collection.readers.filter(pk=person.pk).exists()
        or collection.maintainers.filter(pk=person.pk).exists()
    )


def may_maintain(person: AbstractBaseUser | None, collection: Collection) -> bool:
    """May `person` add, change or remove documents and readers of `collection`?"""
    if not _active(person):
        return False
    return person.is_superuser or collection.maintainers.filter(pk=person.pk).exists()


def _reader_ids(collection: Collection) -> set[int]:
    ids = set(collection.readers.filter(is_active=True).values_list("pk", flat=True))
    ids |= set(collection.maintainers.filter(is_active=True).values_list("pk", flat=True))
    return ids


@dataclass(frozen=True)
class Verdict:
    """Whether a collection may be used in a chat; `reason` says why not, in words for people."""

    allowed: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOWED = Verdict(True)


def chat_may_use(chat: Chat, collection: Collection, *, actor: Actor | None = None) -> Verdict:
    """May the passages of `collection` appear in `chat`, whose current message is by
    `actor`? The rule of this module's docstring, read from the database as it is now."""
    if collection.everyone_may_read:
        return ALLOWED
    if (chat.channel, chat.kind) in _UNKNOWN_READERS:
        return Verdict(
            False,
            f"{collection.name} is restricted, and the hub does not know everyone who reads "
            "a Telegram group",
        )
    readers = _reader_ids(collection)
    member_ids = set(ChatMember.objects.filter(chat=chat).values_list("person_id", flat=True))
    if not member_ids:
        return Verdict(False, "the chat has no members the hub knows")
    if not member_ids <= readers:
        return Verdict(False, f"not every member of this chat may read {collection.name}")
    authors = Actor.objects.filter(
        Q(pk__in=Message.objects.filter(chat=chat, actor__isnull=False).values("actor_id"))
        | Q(pk=getattr(actor, "pk", None))
    )
    for person_id in authors.values_list("person_id", flat=True):
        if person_id is None or person_id not in readers:
            return Verdict(False, f"someone who speaks in this chat may not read {collection.name}")
    return ALLOWED


def may_turn_on(person: AbstractBaseUser | None, chat: Chat, collection: Collection) -> Verdict:
    """May `person` turn `collection` on in `chat`? Only a decider of the chat (its owner or
    an admin) who may read the collection, and only where `chat_may_use` allows it."""
    if not _active(person):
        return Verdict(False, "nobody is signed in")
    role = ChatMember.objects.filter(chat=chat, person=person).values_list("role", flat=True)
    if role.first() not in DECIDER_ROLES:
        return Verdict(False, "only an owner or admin of the chat turns knowledge on there")
    if not may_read(person, collection):
        return Verdict(False, f"you may not read {collection.name}")
    return chat_may_use(chat, collection)


def collections_on(chat: Chat) -> list[Collection]:
    """The collections on in `chat` (turned on there, or a team default), by name; whether
    they may be used there now is `chat_may_use`'s question."""
    return list(
        Collection.objects.filter(
            Q(pk__in=ChatCollection.objects.filter(chat=chat).values("collection_id"))
            | Q(team_default=True, everyone_may_read=True)
        ).order_by("name")
    )


def chat_may_have_collections(chat: Chat) -> bool:
    """False only when `collections_on(chat)` is surely empty: no collection turned on in the
    chat and no team default. Asked first on every turn by the tool provider and the prompt
    section, so it is one statement written once (no queryset compiled) and always current."""
    return bool(
        fetch_prepared(
            "chat_may_have_collections", _may_have_collections_sql, [chat.pk, True, True]
        )
    )


def _may_have_collections_sql(quote) -> str:
    collection, on = Collection._meta, ChatCollection._meta

    def column(meta, name: str) -> str:
        return f"{quote(meta.db_table)}.{quote(meta.get_field(name).column)}"

    return (
        f"SELECT 1 FROM {quote(on.db_table)} WHERE {column(on, 'chat')} = %s "
        f"UNION ALL SELECT 1 FROM {quote(collection.db_table)} "
        f"WHERE {column(collection, 'team_default')} = %s "
        f"AND {column(collection, 'everyone_may_read')} = %s LIMIT 1"
    )


def collections_for_turn(chat: Chat, *, actor: Actor | None = None) -> list[Collection]:
    """The collections whose passages may appear in `chat` now: on there and allowed by the
    readers rule. The one list the tool and the prompt section search."""
    return [c for c in collections_on(chat) if chat_may_use(chat, c, actor=actor)]
