"""The dashboard composer's upload: `POST /attachments/chats/<chat_key>/messages`, a message's
text and its files in one multipart request (login session + CSRF header), sent by
static/js/chat.js with upload progress.

Who may: a reader of the chat who may post there now (`chats.selectors.chat_may_post`), in a
chat the web page posts into (web rooms, as for the composer's text-only posts: a Telegram
group is answered where it lives); outsiders get the same 404 as for a chat that does not
exist, members who may only read get 403. The message is stored once per client id (a
repeat is a duplicate: 200, its files not stored again), then each file in its own
transaction (attachments/message_files.py), and only then is the message announced to the
room and its turn requested: every viewer receives it with its files, and the agent's turn
starts with the files in place. A file over a limit is refused with the reason (413, or 400
for too many files) and the message and the other files are kept.

The answer is JSON: `html` (the message as the page renders it), `refused` and `error` (the
reasons, for the composer to show).
"""

import uuid

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from attachments.message_files import FilesStored, message_files_store
from attachments.waiting import turn_request_when_ready
from chats.agent.turns import message_received
from chats.extras import with_extras_html
from chats.forms import MAX_MESSAGE_CHARS
from chats.models import Chat, Message
from chats.ratelimit import window_retry_after
from chats.selectors import chat_for_person, chat_may_post
from chats.services import IngestError, message_ingest, person_actor_id
from chats.views import POSTABLE_CHANNELS

FILES_FIELD = "files"
PATH_PREFIX = "/attachments/chats/"


class _UploadForm(forms.Form):
    text = forms.CharField(max_length=MAX_MESSAGE_CHARS, strip=True, required=False)
    client_id = forms.UUIDField(required=False)


def upload_body_limit() -> int:
    """The largest body of the composer's upload (the same bound as the API's uploads)."""
    return settings.ATTACHMENTS_API_MAX_BODY_BYTES


def _refusal(status: int, error: str, **extra) -> JsonResponse:
    return JsonResponse({"error": error, **extra}, status=status)


def _message_html(request: HttpRequest, chat: Chat, message) -> str:
    context = {"chat": chat, "agent_name": settings.AGENT_NAME, "message": message}
    with_extras_html([message], request.user)
    return render_to_string("chats/chat.html#message", context, request=request)


def _read_form(request: HttpRequest) -> tuple[dict, list] | JsonResponse:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    limit = upload_body_limit()
    if declared > limit:
        return _refusal(413, f"Files may add up to {limit // (1024 * 1024)} MB per message.")
    if not request.content_type.startswith("multipart/form-data"):
        return _refusal(415, "Send the message as multipart/form-data.")
    try:
        form = _UploadForm(request.POST)
        files = request.FILES.getlist(FILES_FIELD)
    except RequestDataTooBig:
        return _refusal(413, "The message's text is too long.")
    except MultiPartParserError:
        return _refusal(400, "The upload could not be read: send it again.")
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        return _refusal(400, errors[0] if field == "text" else "Send it again.")
    if not form.cleaned_data["text"] and not files:
        return _refusal(400, "Write a message or attach a file first.")
    return form.cleaned_data, files


@login_required
@require_POST
def message_upload(request: HttpRequest, chat_key: str) -> JsonResponse:
    """Store a member's message with its files, then announce it and request its turn."""
    person = request.user
    chat = chat_for_person(person, chat_key)
    if chat is None:  # outsiders and unknown keys look the same
        return _refusal(404, "No such chat.")
    if chat.channel not in POSTABLE_CHANNELS:
        return _refusal(403, "Messages can be posted from the web into web rooms only.")
    verdict = chat_may_post(person, chat)
    if not verdict:
        return _refusal(403, f"You may not post here: {verdict.reason}.")
    retry_after = window_retry_after(
        scope="web-post", key=str(person.pk), limit=settings.WEB_POST_RATE_LIMIT_PER_MINUTE
    )
    if retry_after is not None:
        response = _refusal(
            429, f"You are sending messages too fast: wait {retry_after} s, then send it again."
        )
        response["Retry-After"] = str(retry_after)
        return response
    parsed = _read_form(request)
    if isinstance(parsed, JsonResponse):
        return parsed
    fields, files = parsed
    try:
        result = message_ingest(
            channel=chat.channel,
            chat_id=chat.external_id,
            thread_id=chat.thread_id or None,
            user_id=person_actor_id(person),
            user_name=person.get_full_name() or person.get_username(),
            person=person,
            text=fields["text"],
            message_id=str(fields["client_id"] or uuid.uuid4()),
        )
    except IngestError as exc:
        return _refusal(400, str(exc))
    outcome = FilesStored()
    if not result.duplicate:
        outcome = message_files_store(message=result.message, files=files)
    # Announced (and its turn requested) only now, with its files stored: every viewer
    # fetches it with them, and the turn sees them; a file still being read holds the turn
    # until it is (attachments.waiting), within ATTACHMENTS_TURN_WAIT_SECONDS.
    message_received(result, held=True)
    waiting = False
    if not result.duplicate and result.message.role == Message.Role.USER:
        with transaction.atomic():
            waiting = turn_request_when_ready(message=result.message) is None
    body = {
        "message_id": result.message.pk,
        # Held for its files: the composer offers Stop (chats' POST /chats/<key>/stop).
        "turn_waits_for_files": waiting,
        "stop_url": reverse("chat_stop", args=[chat.chat_key]),
        "duplicate": result.duplicate,
        "html": _message_html(request, chat, result.message),
        "attachments": [attachment.pk for attachment in outcome.stored],
        "refused": [{"name": item.name, "reason": item.reason} for item in outcome.refused],
        "error": outcome.refusal_text() or None,
    }
    status = outcome.refusal_status() or (200 if result.duplicate else 201)
    return JsonResponse(body, status=status)
