"""Reads of attachments: only ever for people who may read the message's chat."""

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser

from attachments.models import Attachment
from chats.models import Message
from chats.selectors import chats_readable_by


def attachment_for_person(person: AbstractBaseUser, attachment_id: int) -> Attachment | None:
    """The attachment if `person` may read its message's chat (a member, active), else None
    (callers answer 404, never 403: an attachment's existence is not disclosed)."""
    return (
        Attachment.objects.select_related("blob", "message")
        .filter(pk=attachment_id, message__chat__in=chats_readable_by(person))
        .first()
    )


def attachments_by_message(messages: Sequence[Message]) -> dict[int, list[Attachment]]:
    """The attachments of `messages`, by message pk, in the order they were stored."""
    by_message: dict[int, list[Attachment]] = {}
    for attachment in Attachment.objects.filter(message__in=[m.pk for m in messages]):
        by_message.setdefault(attachment.message_id, []).append(attachment)
    return by_message
