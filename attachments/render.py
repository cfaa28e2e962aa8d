"""The JSON shape of an attachment, and the `attachments` message extra built from it."""

from collections.abc import Sequence

from attachments.models import Attachment
from attachments.selectors import attachments_by_message
from chats.models import Message
from chats.payloads import iso


def api_download_url(attachment: Attachment) -> str:
    return f"/api/v1/attachments/{attachment.pk}"


def attachment_json(attachment: Attachment) -> dict:
    return {
        "id": attachment.pk,
        "name": attachment.name,
        "kind": attachment.kind,
        "media_type": attachment.media_type,
        "size": attachment.size,
        "sha256": attachment.sha256,
        "state": attachment.state,
        "failure": attachment.failure or None,
        "created_at": iso(attachment.created_at),
        "download_url": api_download_url(attachment) if attachment.blob_id else None,
    }


def attachments_extras(messages: Sequence[Message]) -> dict[int, list[dict]]:
    """The `attachments` extra of each message that has any (one query per page)."""
    return {
        pk: [attachment_json(a) for a in attachments]
        for pk, attachments in attachments_by_message(messages).items()
    }
