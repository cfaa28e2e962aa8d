"""Serving a blob: only to readers of the chat, as a download (never rendered by the
browser), with the name as given (RFC 5987) and a sandboxing CSP. Allow-listed raster
images (attachments/thumbnails.py) are also served inline, with their sniffed type and the
same headers, for the page's thumbnails and image view."""

import re

from django.http import FileResponse, HttpResponse

from attachments.models import Attachment
from attachments.names import download_disposition
from attachments.sniffing import ACTIVE_TYPES, OCTET_STREAM
from attachments.thumbnails import INLINE_IMAGE_TYPES, THUMBNAIL_TYPE


def download_response(attachment: Attachment) -> HttpResponse:
    """The attachment's bytes as `Content-Disposition: attachment`; active types (HTML, SVG)
    go out as application/octet-stream so nothing can run them in the hub's origin."""
    media_type = attachment.media_type
    if media_type in ACTIVE_TYPES or not media_type:
        media_type = OCTET_STREAM
    response = FileResponse(attachment.blob.file.open("rb"), content_type=media_type)
    response["Content-Disposition"] = download_disposition(attachment.name)
    response["Content-Length"] = str(attachment.size)
    return _guarded(response)


def _guarded(response: HttpResponse) -> HttpResponse:
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = "private, no-store"
    return response


def image_response(attachment: Attachment) -> HttpResponse:
    """An allow-listed image inline, as its sniffed type (never the sender's claim)."""
    if attachment.media_type not in INLINE_IMAGE_TYPES:
        raise ValueError(f"{attachment.media_type} is never served inline")
    response = FileResponse(attachment.blob.file.open("rb"), content_type=attachment.media_type)
    response["Content-Disposition"] = download_disposition(attachment.name).replace(
        "attachment;", "inline;", 1
    )
    response["Content-Length"] = str(attachment.size)
    return _guarded(response)


# What the dashboard's player may play inline: sniffed audio, and the audio track of the
# video containers a voice or video note comes in. Anything else only downloads.
LISTEN_TYPES = frozenset(
    {
        "audio/ogg",
        "audio/webm",
        "audio/mpeg",
        "audio/mp4",
        "audio/x-m4a",
        "audio/aac",
        "audio/x-wav",
        "audio/wav",
        "audio/x-flac",
        "audio/flac",
        "video/webm",
        "video/mp4",
    }
)


def listens_inline(attachment: Attachment) -> bool:
    return attachment.blob_id is not None and attachment.media_type in LISTEN_TYPES


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) of one `bytes=` range within `size`, else None (the whole file)."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if not match or not (match[1] or match[2]) or size == 0:
        return None
    if match[1]:
        first = int(match[1])
        last = min(int(match[2]), size - 1) if match[2] else size - 1
    else:  # the last N bytes
        first, last = max(0, size - int(match[2])), size - 1
    if first > last or first >= size:
        return None
    return first, last


def audio_response(attachment: Attachment, range_header: str = "") -> HttpResponse:
    """A heard file inline for the page's player, as its sniffed type, with the download's
    guards (sandbox, nosniff, not kept by the browser). One byte range (`Range: bytes=…`)
    is answered 206, so the player can seek in a long recording without loading it all."""
    if not listens_inline(attachment):
        raise ValueError(f"{attachment.media_type} is never played inline")
    wanted = _byte_range(range_header, attachment.size) if range_header else None
    if wanted is None:
        response = FileResponse(attachment.blob.file.open("rb"), content_type=attachment.media_type)
        response["Content-Length"] = str(attachment.size)
    else:
        first, last = wanted
        with attachment.blob.file.open("rb") as handle:
            handle.seek(first)
            part = handle.read(last - first + 1)
        response = HttpResponse(part, status=206, content_type=attachment.media_type)
        response["Content-Range"] = f"bytes {first}-{last}/{attachment.size}"
    response["Accept-Ranges"] = "bytes"
    response["Content-Disposition"] = download_disposition(attachment.name).replace(
        "attachment;", "inline;", 1
    )
    return _guarded(response)


def thumbnail_response(thumbnail: bytes) -> HttpResponse:
    """A thumbnail, not kept by the browser either: someone removed from the chat sees none
    of its images from then on (making one again costs a read of the kept WebP)."""
    response = HttpResponse(thumbnail, content_type=THUMBNAIL_TYPE)
    response["Content-Disposition"] = 'inline; filename="thumbnail.webp"'
    return _guarded(response)
