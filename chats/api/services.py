"""The API's one write: a message posted by the holder of a token, within that token's rights.

Who the API may speak as (docs/SECURITY.md): only the `api` channel, whose chats it creates
and whose kind it decides; its users are the token owner's integration users, kept in the
owner's own actor namespace and never linked to a Person, so a token never acts as another
person, whatever `user_id` it sends.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from chats.agent.turns import message_received
from chats.api.parsing import MessagePost
from chats.models import Channel, ChatKind, ChatMember, Turn
from chats.selectors import chat_may_post
from chats.services import (
    IngestError,
    IngestResult,
    chat_get_or_create,
    chat_member_ensure,
    message_ingest,
)

# The kinds an API conversation may have: one integration user, several (a group), or a
# thread of one (a topic, implied by thread_id). DMs, rooms and terminals belong to the
# adapters of those channels.
API_CHAT_KINDS = (ChatKind.API, ChatKind.GROUP, ChatKind.TOPIC)


class NotAMember(Exception):
    """The chat exists and the person posting is not one of its members."""


class ChannelNotAllowed(Exception):
    """The post names a channel other than `api`: only that channel's own adapter writes it."""


class ChatKindConflict(Exception):
    """The post names a kind other than the one the chat was created with."""


def api_actor_namespace(person: AbstractBaseUser) -> str:
    """The actor namespace of a token owner's integration users: theirs alone."""
    return f"owner:{person.pk}"


def _kind_for(post: MessagePost) -> str | None:
    kind = post.chat_kind
    if post.thread_id is not None:
        if kind not in (None, ChatKind.TOPIC):
            raise IngestError("chat_kind", "a post with thread_id is in a topic: chat_kind topic")
        return ChatKind.TOPIC
    if kind == ChatKind.TOPIC:
        raise IngestError("chat_kind", "chat_kind topic needs a thread_id")
    if kind is not None and kind not in API_CHAT_KINDS:
        allowed = ", ".join(k for k in API_CHAT_KINDS if k != ChatKind.TOPIC)
        raise IngestError(
            "chat_kind",
            f"chat_kind {kind!r} belongs to another channel's adapter; API chats are {allowed}",
        )
    return kind


def api_message_post(
    *, person: AbstractBaseUser, post: MessagePost
) -> tuple[IngestResult, Turn | None]:
    """Store `post` once, in the `api` channel, as an integration user of `person`.

    A new chat gets `person` as owner and the kind the post names; an existing chat must
    already count `person` as a member (else NotAMember) and keeps its kind (a different
    one is ChatKindConflict). Another channel is ChannelNotAllowed. Nothing is stored when
    anything is refused. A newly stored message gets a turn (enqueued after commit) when
    `post.respond`.
    """
    if post.channel != Channel.API:
        raise ChannelNotAllowed(post.channel)
    kind = _kind_for(post)
    with transaction.atomic():
        # No title here: a chat's title may only change once membership is established.
        chat, created = chat_get_or_create(
            channel=Channel.API, chat_id=post.chat_id, thread_id=post.thread_id, kind=kind
        )
        if created:
            chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
        elif not chat_may_post(person, chat):
            raise NotAMember(chat.chat_key)
        elif kind is not None and kind != chat.kind:
            raise ChatKindConflict(chat.kind)
        result = message_ingest(
            channel=Channel.API,
            chat_id=post.chat_id,
            thread_id=post.thread_id,
            user_id=post.user_id,
            user_name=post.user_name,
            actor_namespace=api_actor_namespace(person),
            message_id=post.message_id,
            text=post.text,
            chat_title=post.chat_title,
            source_ts=post.source_ts,
            member=person,
        )
        return result, message_received(result, respond=post.respond)
