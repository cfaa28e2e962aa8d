"""Notices: short lines the hub itself posts into a chat for the people in it (a proposal
made there expired). The learning loop's "saved for review" notice does not come through here
yet: it stays on the dashboard and is not sent to Telegram.

A notice is a system message with `metadata["notice"]` naming its kind: the history keeps it
and the dashboard shows it live, the model never reads it (the context builder and the
snapshots of reviews skip notices). Every reader of the chat sees it, so its text must follow
the audience rule: nothing a reader of that chat may not see (never a fact about one person
in a group). `chats.signals.notice_posted` lets other channels deliver it (the Telegram
bridge sends it to a Telegram chat).
"""

import logging

from django.db import transaction

from chats.agent import events
from chats.models import Chat, Message
from chats.payloads import message_payload
from chats.services import message_append
from chats.signals import notice_posted

logger = logging.getLogger(__name__)


def chat_notice_post(*, chat: Chat, text: str, kind: str, detail: dict | None = None) -> Message:
    """Append a notice of `kind` to `chat` (in the caller's transaction, with whatever other
    channels queue for it) and publish it to the chat's live viewers once committed."""
    with transaction.atomic():
        message = message_append(
            chat=chat,
            role=Message.Role.SYSTEM,
            text=text,
            metadata={**(detail or {}), "notice": kind},
        )
        for receiver, result in notice_posted.send_robust(sender=Chat, chat=chat, message=message):
            if isinstance(result, Exception):
                logger.error(
                    "notice %s in chat %s: %s failed: %r", message.pk, chat.pk, receiver, result
                )
        transaction.on_commit(
            lambda: events.publish(chat.pk, "message.created", message=message_payload(message))
        )
    return message
