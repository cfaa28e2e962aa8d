"""The dashboard's HTML of a message's files, registered with the message HTML registry
(chats/extras.py): images as thumbnails, audio (voice messages, video notes) as a player
with its transcript under it, other files as cards with name, size and type, each with its
download link and its state (pending, failed with the reason)."""

from collections.abc import Sequence

from django.conf import settings
from django.template.loader import render_to_string
from django.urls import reverse

from attachments.details import attachment_details
from attachments.downloads import listens_inline
from attachments.models import Attachment
from attachments.render import HEARD_KINDS, transcript_json
from attachments.selectors import attachments_by_message
from attachments.thumbnails import shows_inline
from attachments.web import upload_body_limit
from chats.models import Message

TEMPLATE = "attachments/files.html"


def _file_view(attachment: Attachment, details: dict | None = None) -> dict:
    stored = attachment.blob_id is not None
    heard = attachment.kind in HEARD_KINDS and attachment.received
    return {
        "received": attachment.received,
        # A heard file's card: the player and, under it, the transcript (or its state).
        "heard": heard,
        "listen_url": (
            reverse("attachment_listen", args=[attachment.pk])
            if heard and listens_inline(attachment)
            else ""
        ),
        "transcript": (
            transcript_json(attachment, (details or {}).get("transcript")) if heard else None
        ),
        "attachment": attachment,
        "image": shows_inline(attachment),
        "download_url": reverse("attachment_download", args=[attachment.pk]) if stored else "",
        "thumbnail_url": reverse("attachment_thumbnail", args=[attachment.pk]),
        "view_url": reverse("attachment_view", args=[attachment.pk]),
        "type_label": _type_label(attachment),
    }


def _type_label(attachment: Attachment) -> str:
    """What the card says the file is: from the sniffed type, never from the name (a file
    never received: the type its sender announced, said so)."""
    if not attachment.received:
        return f"{attachment.declared_type} (as announced)" if attachment.declared_type else ""
    subtype = attachment.media_type.partition("/")[2]
    short = {
        "pdf": "PDF",
        "plain": "text",
        "vnd.openxmlformats-officedocument.wordprocessingml.document": "Word document",
        "vnd.openxmlformats-officedocument.spreadsheetml.sheet": "Excel workbook",
        "vnd.openxmlformats-officedocument.presentationml.presentation": "PowerPoint",
        "octet-stream": "binary",
    }
    return short.get(subtype, attachment.media_type or "unknown")


def attachments_html(messages: Sequence[Message]) -> dict[int, str]:
    """`{message pk: HTML}` of the files of the messages that have any (one query)."""
    by_message = attachments_by_message(messages)
    details = attachment_details([a for files in by_message.values() for a in files])
    return {
        pk: render_to_string(
            TEMPLATE, {"files": [_file_view(a, details.get(a.pk)) for a in attachments]}
        )
        for pk, attachments in by_message.items()
    }


def composer_html(chat, person) -> str:
    """The composer's file controls: the Attach button (drag and drop and paste work on the
    whole composer), the chips of the files to send, the upload's progress."""
    return render_to_string(
        "attachments/composer.html",
        {
            "upload_url": reverse("attachments_post", args=[chat.chat_key]),
            "max_file_bytes": settings.ATTACHMENTS_MAX_FILE_BYTES,
            "max_files": settings.ATTACHMENTS_MAX_PER_MESSAGE,
            "max_body_bytes": upload_body_limit(),
            "max_record_seconds": settings.ATTACHMENTS_RECORD_MAX_SECONDS,
        },
    )
