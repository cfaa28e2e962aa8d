"""The API's one write: a message posted by the holder of a token, with membership rules."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from chats.agent.turns import message_received
from chats.api.parsing import MessagePost
from chats.models import ChatMember, Turn
from chats.services import IngestResult, chat_get_or_create, chat_member_ensure, message_ingest


class NotAMember(Exception):
    """The chat exists and the person posting is not one of its members."""


def api_message_post(
    *, person: AbstractBaseUser, post: MessagePost
) -> tuple[IngestResult, Turn | None]:
    """Store `post` once, as `person`: a new chat gets `person` as owner; an existing chat
    must already count `person` as a member, else NotAMember and nothing changes. A newly
    stored message gets a turn (enqueued after commit) when `post.respond`.

    Atomic: if ingestion refuses the message, the chat created for it is rolled back too.
    """
    with transaction.atomic():
        # No title here: a chat's title may only change once membership is established.
        chat, created = chat_get_or_create(
            channel=post.channel,
            chat_id=post.chat_id,
            thread_id=post.thread_id,
            kind=post.chat_kind,
        )
        if created:
            chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
        elif not ChatMember.objects.filter(chat=chat, person=person).exists():
            raise NotAMember(chat.chat_key)
        result = message_ingest(
            channel=post.channel,
            chat_id=post.chat_id,
            thread_id=post.thread_id,
            user_id=post.user_id,
            user_name=post.user_name,
            message_id=post.message_id,
            text=post.text,
            chat_title=post.chat_title,
            source_ts=post.source_ts,
            member=person,
        )
        return result, message_received(result, respond=post.respond)
