"""The JSON shape of an attachment, and the `attachments` message extra built from it."""

from collections.abc import Sequence

from attachments.details import attachment_details
from attachments.models import Attachment
from attachments.selectors import attachments_by_message
from chats.models import Message
from chats.payloads import iso


def api_download_url(attachment: Attachment) -> str:
    return f"/api/v1/attachments/{attachment.pk}"


# Files whose derived text is a transcript (the processors' business: audio, video notes).
HEARD_KINDS = (Attachment.Kind.AUDIO, Attachment.Kind.VIDEO)


def transcript_json(attachment: Attachment, detail: dict | None = None) -> dict:
    """A heard file's transcript as far as it is made: always machine-made; its language,
    duration and progress from the app that made it (`attachments.details`, "transcript")."""
    state = attachment.state
    text = attachment.extracted_text if state == Attachment.State.READY else ""
    shown = {
        "state": state,
        "text": text or None,
        "machine_made": True,
        "language": None,
        "duration_seconds": None,
    }
    for key, value in (detail or {}).items():
        if key not in ("state", "machine_made") and not (key == "text" and shown["text"]):
            shown[key] = value
    shown["machine_made"] = True  # nobody typed it, whatever a provider says
    return shown


def attachment_json(attachment: Attachment, details: dict | None = None) -> dict:
    details = details or {}
    shown = {
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
        # False: the channel announced it but the hub never got it (`failure` says why).
        "received": attachment.received,
    }
    for name, detail in details.items():
        if name not in shown and name != "transcript":
            shown[name] = detail
    if attachment.kind in HEARD_KINDS and attachment.received:
        shown["transcript"] = transcript_json(attachment, details.get("transcript"))
    return shown


def attachments_extras(messages: Sequence[Message]) -> dict[int, list[dict]]:
    """The `attachments` extra of each message that has any (one query per page)."""
    by_message = attachments_by_message(messages)
    details = attachment_details([a for files in by_message.values() for a in files])
    return {
        pk: [attachment_json(a, details.get(a.pk)) for a in attachments]
        for pk, attachments in by_message.items()
    }
