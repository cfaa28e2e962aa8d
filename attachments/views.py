"""Attachment views: the dashboard's download and the HTTP API v1's download and upload.
Thin: parse, call one selector or service, render."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from attachments.downloads import download_response
from attachments.selectors import attachment_for_person
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
