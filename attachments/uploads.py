"""The HTTP API v1's upload: `POST /api/v1/uploads/messages`, multipart/form-data with the
fields of a JSON message post (docs/API.md) plus any number of `files`.

The message is stored once per message id exactly as a JSON post stores it (a repeat is a
duplicate: 200, and its files are not stored again); each file is then stored in its own
transaction, and the turn is requested only once every file is stored or refused and none
is `pending` any more (attachments.waiting: else `turn` is null and `turn_waits_for_files`
true, and the turn comes once they are read, or after ATTACHMENTS_TURN_WAIT_SECONDS), so
the agent sees the message with its files. A refused file (over a limit) never loses the
message: the answer is 413 (or 400 for too many files) with the reasons and the message.
"""

import dataclasses

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError

from attachments.message_files import FilesStored, message_files_store
from attachments.render import attachment_json
from attachments.waiting import turn_request_when_ready
from chats.api.errors import ApiError, bad_request
from chats.api.parsing import MESSAGE_FIELDS, parse_message_post
from chats.api.render import message_json, turn_json
from chats.api.services import api_message_post
from chats.api.views import post_refusals_as_api_errors
from chats.models import Message

FILES_FIELD = "files"


def _too_large() -> ApiError:
    limit = settings.ATTACHMENTS_API_MAX_BODY_BYTES
    return ApiError(413, "payload_too_large", f"The request body must be at most {limit} bytes.")


def _form_payload(request: HttpRequest) -> dict:
    """The form's fields as a JSON post's object (`respond` as a boolean)."""
    payload: dict = {}
    for field, values in request.POST.lists():
        if field not in MESSAGE_FIELDS:
            raise bad_request(
                "unknown_field",
                f"Unknown field {field!r}; allowed: {', '.join(MESSAGE_FIELDS)}, {FILES_FIELD}.",
                field=field,
            )
        if len(values) != 1:
            raise bad_request("invalid_field", f"Send {field!r} once.", field=field)
        payload[field] = values[0]
    if "respond" in payload:
        respond = payload["respond"].strip().lower()
        if respond not in ("true", "false"):
            raise bad_request("invalid_field", "respond must be true or false.", field="respond")
        payload["respond"] = respond == "true"
    return payload


def _read_form(request: HttpRequest) -> tuple[dict, list]:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > settings.ATTACHMENTS_API_MAX_BODY_BYTES:
        raise _too_large()
    if not request.content_type.startswith("multipart/form-data"):
        raise ApiError(
            415,
            "unsupported_media_type",
            "Send multipart/form-data: the message's fields and its `files`.",
        )
    try:
        files = request.FILES.getlist(FILES_FIELD)
        unknown_files = sorted(set(request.FILES) - {FILES_FIELD})
        payload = _form_payload(request)
    except RequestDataTooBig as exc:  # the form's fields (not its files) past their bound
        raise ApiError(
            413,
            "payload_too_large",
            f"The form's fields must be at most {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
        ) from exc
    except MultiPartParserError as exc:
        raise bad_request("malformed_body", f"The multipart body could not be read: {exc}") from exc
    if unknown_files:
        raise bad_request(
            "unknown_field",
            f"Files go in {FILES_FIELD!r}, not {unknown_files[0]!r}.",
            field=unknown_files[0],
        )
    return payload, files


def api_upload(request: HttpRequest, person) -> JsonResponse:
    """Store the message, then its files, then request its turn; answer with all three."""
    payload, files = _read_form(request)
    post = parse_message_post(payload)
    with post_refusals_as_api_errors():
        result, _ = api_message_post(person=person, post=dataclasses.replace(post, respond=False))
    outcome = FilesStored()
    if not result.duplicate:
        outcome = message_files_store(message=result.message, files=files)
    stored = outcome.stored
    refused = [
        {"name": item.name, "reason": item.reason, "status": item.status}
        for item in outcome.refused
    ]
    turn, waiting = None, False
    if post.respond and not result.duplicate and result.message.role == Message.Role.USER:
        with transaction.atomic():
            turn = turn_request_when_ready(message=result.message)
        waiting = turn is None
    body = {
        "chat_key": result.chat.chat_key,
        "message": message_json(result.message, person=person),
        "duplicate": result.duplicate,
        "turn": turn_json(turn, person=person) if turn is not None else None,
        # The turn is requested once the files are read (or after the bounded wait).
        "turn_waits_for_files": waiting,
        "attachments": [attachment_json(a) for a in stored],
    }
    if refused:
        status = max(item.pop("status") for item in refused)
        body["refused"] = refused
        body["error"] = {
            "code": "attachment_refused",
            "message": "; ".join(f"{item['name']}: {item['reason']}" for item in refused)
            + " The message was stored without these files.",
        }
        return JsonResponse(body, status=status)
    return JsonResponse(body, status=200 if result.duplicate else 201)
