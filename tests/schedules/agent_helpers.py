"""Helpers of the tests of the agent's schedule tool, approvals and isolated runs: messages
said by people on Telegram and the web, and the tool called with a turn's context."""

import pytest

from chats.agent.registry import TurnContext
from chats.models import ChatKind, ChatMember, Message
from chats.services import message_ingest
from operations.services import heartbeat_beat
from schedules.agent_tool import SCHEDULE_TOOL
from schedules.selectors import DISPATCHER_HEARTBEAT


def said(text, *, chat_id, user, name="", channel="telegram", kind=None, person=None, **extra):
    """Store a message as a Telegram (or other channel's) user says it; `person` links a
    newly seen actor and makes them a member."""
    result = message_ingest(
        channel=channel,
        chat_id=chat_id,
        user_id=user,
        user_name=name or str(user),
        text=text,
        chat_kind=kind,
        person=person,
        member=person,
        **extra,
    )
    return result.message


def context_of(message: Message, **fields) -> TurnContext:
    message = Message.objects.select_related("actor__person", "chat").get(pk=message.pk)
    actor = message.actor
    return TurnContext(
        chat=message.chat,
        trigger=message,
        actor=actor,
        person=actor.person if actor else None,
        **fields,
    )


def call(message: Message, **arguments) -> str:
    """The schedule tool's answer to `arguments` in the turn `message` triggers."""
    return SCHEDULE_TOOL.handler(context_of(message), arguments)


def beat():
    """A dispatcher that ran just now: the tool's answers carry no warning."""
    heartbeat_beat(name=DISPATCHER_HEARTBEAT, host="test")


@pytest.fixture
def group(owner, member, outsider):
    """A Telegram group: olivia (its admin, Telegram user 10) and marco (a member, user 11);
    oscar (user 12) is not in it."""
    said("hi", chat_id="-100", user="10", name="Olivia", kind=ChatKind.GROUP, person=owner)
    message = said(
        "hi", chat_id="-100", user="11", name="Marco", kind=ChatKind.GROUP, person=member
    )
    chat = message.chat
    ChatMember.objects.filter(chat=chat, person=owner).update(role=ChatMember.Role.ADMIN)
    return chat


@pytest.fixture
def olivia_dm(owner):
    """Olivia's private Telegram chat with the bot."""
    return said("hi", chat_id="10", user="10", name="Olivia", kind=ChatKind.DM, person=owner).chat


def in_group(text="remind us", user="10", name="Olivia", person=None):
    return said(text, chat_id="-100", user=user, name=name, kind=ChatKind.GROUP, person=person)
