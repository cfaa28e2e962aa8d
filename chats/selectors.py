"""Reads of chats and history. Every read that a person triggers is limited to the chats
that person is a member of; nothing here crosses that line."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Case, IntegerField, Q, QuerySet, Value, When

from chats.models import Channel, Chat, ChatKind, ChatMember, Message, Turn
from chats.posting import ALLOWED, PostVerdict, post_check

# Chats whose one author is their owner: a personal key's `/v1` conversation is answered to
# that key only; people added to it read it and never speak there.
OWNER_SPEAKS_ONLY = frozenset({Channel.OPENAI})
# Kinds whose readers are the group, or whoever is added later (a room's new members read
# its history): never private to anyone, whatever their member count today.
ALWAYS_SHARED_KINDS = frozenset({ChatKind.GROUP, ChatKind.TOPIC, ChatKind.ROOM})


def chats_readable_by(person: AbstractBaseUser) -> QuerySet[Chat]:
    """Chats `person` is a member of, newest activity first (empty for anonymous users)."""
    if person is None or not person.is_authenticated or not person.is_active:
        return Chat.objects.none()
    return Chat.objects.filter(memberships__person=person).order_by("-last_activity_at", "-id")


def chat_for_person(person: AbstractBaseUser, chat_key: str) -> Chat | None:
    """The chat with `chat_key` if `person` may read it, else None (callers answer 404)."""
    return chats_readable_by(person).filter(chat_key=chat_key).first()


def chat_still_readable(person_id: int, chat_id: int) -> bool:
    """Whether the person, as stored now (they may have been removed or deactivated since a
    connection opened), may read the chat: one query, for long-lived connections."""
    return Chat.objects.filter(
        pk=chat_id, memberships__person_id=person_id, memberships__person__is_active=True
    ).exists()


def chat_may_post(person: AbstractBaseUser | None, chat: Chat) -> PostVerdict:
    """The one rule of every door that puts a person's words in a chat and makes the agent
    run there (web composer, API v1, `/v1`, terminal, schedules, the schedule tool): an
    active person, a member of the chat as stored now, its owner in a `/v1` conversation,
    and, where the chat lives on another platform, still allowed there by that channel's
    adapter (a Telegram group: not left, not banned). Falsy with a reason when not."""
    if person is None or not person.is_authenticated:
        return PostVerdict(False, "nobody is signed in")
    role = (
        ChatMember.objects.filter(chat_id=chat.pk, person_id=person.pk, person__is_active=True)
        .values_list("role", flat=True)
        .first()
    )
    if role is None:
        return PostVerdict(False, f"{person.get_username()} is not an active member of this chat")
    if chat.channel in OWNER_SPEAKS_ONLY and role != ChatMember.Role.OWNER:
        return PostVerdict(
            False, "only its owner speaks in this conversation; its other members read it"
        )
    check = post_check(chat.channel)
    return check(person, chat) if check is not None else ALLOWED


def chat_posters() -> QuerySet[ChatMember]:
    """The memberships whose person may post by the hub's own part of `chat_may_post`
    (active; the owner of a `/v1` conversation), to narrow with OuterRefs: one query over
    many chats. What a channel's adapter says (a Telegram group) only `chat_may_post` asks."""
    return ChatMember.objects.filter(person__is_active=True).exclude(
        Q(chat__channel__in=OWNER_SPEAKS_ONLY) & ~Q(role=ChatMember.Role.OWNER)
    )


def chat_private_to(chat: Chat | None, *, person=None, actor=None) -> bool:
    """Is the author of the current message (`person`, or an `actor` linked to nobody) the
    one reader of `chat`? Never a group, forum topic or web room (the group reads it; a
    room's later members read its history); a DM, terminal or API conversation only while
    nobody else is a member: with a member added, what the model shows there is shown to
    them. The one home of "private" for memory, skills, tools, schedules and the engine."""
    if chat is None or chat.kind in ALWAYS_SHARED_KINDS:
        return False
    if person is None and actor is not None and actor.person_id is not None:
        person = actor.person
    if person is None:
        # An unlinked author (an unlinked Telegram user in their DM, an OS login at the
        # terminal) reads alone only where no person is a member at all.
        return actor is not None and not ChatMember.objects.filter(chat_id=chat.pk).exists()
    if not person.is_active:
        return False
    return not ChatMember.objects.filter(chat_id=chat.pk).exclude(person_id=person.pk).exists()


def chat_role(person: AbstractBaseUser, chat: Chat) -> str | None:
    """The person's role in the chat (owner/admin/member), or None for outsiders."""
    if person is None or not person.is_authenticated:
        return None
    return (
        ChatMember.objects.filter(chat=chat, person=person).values_list("role", flat=True).first()
    )


def chat_members(chat: Chat) -> list[ChatMember]:
    """The chat's members with their people: owners, then admins, then members, by name."""
    rank = Case(
        When(role=ChatMember.Role.OWNER, then=Value(0)),
        When(role=ChatMember.Role.ADMIN, then=Value(1)),
        default=Value(2),
        output_field=IntegerField(),
    )
    return list(
        ChatMember.objects.filter(chat=chat)
        .select_related("person")
        .order_by(rank, "person__username")
    )


def last_reset_marker_id(chat: Chat) -> int | None:
    return (
        Message.objects.filter(chat=chat, role=Message.Role.MARKER, metadata__marker="reset")
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )


def chat_history(chat: Chat, *, since_reset: bool = True) -> QuerySet[Message]:
    """Messages of `chat` in order; with `since_reset`, only those after the last reset marker."""
    messages = Message.objects.filter(chat=chat).select_related("actor").order_by("id")
    if since_reset:
        marker_id = last_reset_marker_id(chat)
        if marker_id is not None:
            messages = messages.filter(id__gt=marker_id)
    return messages


def chat_messages_page(
    chat: Chat, *, before: int | None = None, after: int | None = None, limit: int = 50
) -> list[Message]:
    """One page of a chat's whole history in ascending order.

    `before`: the `limit` messages just older than that id (scrolling back);
    `after`: the `limit` messages just newer than that id (catching up);
    neither: the newest `limit` messages.
    """
    messages = Message.objects.filter(chat=chat).select_related("actor", "reply_to")
    if after is not None:
        messages = messages.filter(id__gt=after)
    if before is not None:
        messages = messages.filter(id__lt=before)
    if after is not None and before is None:
        return list(messages.order_by("id")[:limit])
    page = list(messages.order_by("-id")[:limit])
    page.reverse()
    return page


def turn_for_person(person: AbstractBaseUser, turn_id: int) -> Turn | None:
    """A turn of a chat `person` may read, with its chat and reply, else None."""
    return (
        Turn.objects.select_related("chat", "reply__actor")
        .filter(pk=turn_id, chat__in=chats_readable_by(person))
        .first()
    )
