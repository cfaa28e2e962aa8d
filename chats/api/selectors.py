"""Reads the API needs beyond `chats.selectors`, built on it so membership is never bypassed."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import OuterRef, Subquery

from chats.models import Chat, ChatMember, Message
from chats.selectors import chats_readable_by


def chats_with_role(person: AbstractBaseUser, *, limit: int) -> list[Chat]:
    """At most `limit` chats `person` can read, newest activity first, each with `.my_role`."""
    role = ChatMember.objects.filter(chat=OuterRef("pk"), person=person).values("role")[:1]
    return list(chats_readable_by(person).annotate(my_role=Subquery(role))[:limit])


def page_cursors(chat: Chat, page: list[Message]) -> tuple[int | None, int | None]:
    """(next_before, next_after) for a page: the ids to page on, None when nothing is there."""
    if not page:
        return None, None
    older = Message.objects.filter(chat=chat, id__lt=page[0].id).exists()
    newer = Message.objects.filter(chat=chat, id__gt=page[-1].id).exists()
    return (page[0].id if older else None), (page[-1].id if newer else None)
