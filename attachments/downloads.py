"""Serving a blob: only to readers of the chat, always as a download (never rendered by the
browser), with the name as given (RFC 5987) and a sandboxing CSP."""

from django.http import FileResponse, HttpResponse

from attachments.models import Attachment
from attachments.names import download_disposition
from attachments.sniffing import ACTIVE_TYPES, OCTET_STREAM


def download_response(attachment: Attachment) -> HttpResponse:
    """The attachment's bytes as `Content-Disposition: attachment`; active types (HTML, SVG)
    go out as application/octet-stream so nothing can run them in the hub's origin."""
    media_type = attachment.media_type
    if media_type in ACTIVE_TYPES or not media_type:
        media_type = OCTET_STREAM
    response = FileResponse(attachment.blob.file.open("rb"), content_type=media_type)
    response["Content-Disposition"] = download_disposition(attachment.name)
    response["Content-Length"] = str(attachment.size)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = "private, no-store"
    return response
