"""Reads of chats and history. Every read that a person triggers is limited to the chats
that person is a member of; nothing here crosses that line."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Case, IntegerField, QuerySet, Value, When

from chats.models import Chat, ChatMember, Message, Turn


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
