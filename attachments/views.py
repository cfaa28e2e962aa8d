"""Attachment views: the dashboard's download, thumbnail and image view, and the HTTP API
v1's download and upload (the dashboard's upload is attachments/web.py). Thin: parse, call
one selector or service, render."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from attachments.downloads import (
    audio_response,
    download_response,
    image_response,
    listens_inline,
    thumbnail_response,
)
from attachments.selectors import attachment_for_person
from attachments.thumbnails import NoThumbnail, attachment_thumbnail, shows_inline
from attachments.uploads import api_upload
from chats.api.endpoint import api_endpoint
from chats.api.errors import not_found

UNKNOWN_ATTACHMENT = "No attachment with this id is visible to you."


@login_required
@require_GET
def attachment_download(request: HttpRequest, attachment_id: int) -> HttpResponse:
    """Serves the file to a reader of its chat; anyone else gets the same 404 as for none."""
    attachment = attachment_for_person(request.user, attachment_id)
    if attachment is None or attachment.blob_id is None:
        raise Http404(UNKNOWN_ATTACHMENT)
    return download_response(attachment)


@login_required
@require_GET
def attachment_thumbnail_view(request: HttpRequest, attachment_id: int) -> HttpResponse:
    """A small WebP of an allow-listed image (PNG, JPEG, GIF, WebP) for a reader of its chat;
    404 for anyone else and for every other file; 422 for an image that cannot be previewed."""
    attachment = attachment_for_person(request.user, attachment_id)
    if attachment is None or not shows_inline(attachment):
        raise Http404(UNKNOWN_ATTACHMENT)
    try:
        thumbnail = attachment_thumbnail(attachment)
    except NoThumbnail as exc:
        return HttpResponse(str(exc), status=422, content_type="text/plain; charset=utf-8")
    return thumbnail_response(thumbnail)


@login_required
@require_GET
def attachment_view(request: HttpRequest, attachment_id: int) -> HttpResponse:
    """The image itself, inline, for a reader of its chat: only allow-listed raster types
    (never SVG or HTML); every other file is a 404 here and goes through the download."""
    attachment = attachment_for_person(request.user, attachment_id)
    if attachment is None or not shows_inline(attachment):
        raise Http404(UNKNOWN_ATTACHMENT)
    return image_response(attachment)


@login_required
@require_GET
def attachment_listen(request: HttpRequest, attachment_id: int) -> HttpResponse:
    """A voice message or audio file inline, for the page's player, to a reader of its chat;
    404 for anyone else and for every file that is not audio (or a voice or video note)."""
    attachment = attachment_for_person(request.user, attachment_id)
    if attachment is None or not listens_inline(attachment):
        raise Http404(UNKNOWN_ATTACHMENT)
    return audio_response(attachment, request.headers.get("Range", ""))


@api_endpoint("GET")
def api_attachment_download(request: HttpRequest, person, attachment_id: int) -> HttpResponse:
    """Serves the file to the token's owner if they read its chat, else a JSON 404."""
    attachment = attachment_for_person(person, attachment_id)
    if attachment is None or attachment.blob_id is None:
        raise not_found(UNKNOWN_ATTACHMENT)
    return download_response(attachment)


@api_endpoint("POST")
def api_message_upload(request: HttpRequest, person) -> JsonResponse:
    """A message with files (multipart/form-data); see attachments.uploads.api_upload."""
    return api_upload(request, person)
