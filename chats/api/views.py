"""HTTP API v1 views: parse, call one service or selector, render JSON (see docs/API.md)."""

import dataclasses
from contextlib import contextmanager

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from chats.agent.turns import turn_request
from chats.api.endpoint import api_endpoint
from chats.api.errors import ApiError, bad_request, error_response, not_found
from chats.api.parsing import int_param, parse_message_post, read_json_object
from chats.api.post_fields import post_fields_parse, post_fields_store
from chats.api.render import chat_json, message_json, messages_json, search_hits_json, turn_json
from chats.api.selectors import chats_with_role, page_cursors
from chats.api.services import (
    ChannelNotAllowed,
    ChatKindConflict,
    NotAMember,
    api_message_post,
)
from chats.models import Message
from chats.selectors import chat_for_person, chat_messages_page, turn_for_person

DEFAULT_PAGE_SIZE = 50
SEARCH_DEFAULT_LIMIT = 20
SEARCH_MAX_LIMIT = 100
SEARCH_MAX_QUERY = 500
UNKNOWN_CHAT = "No chat with this key is visible to you."


@api_endpoint("POST")
def message_post(request: HttpRequest, person) -> JsonResponse:
    """Stores the message once per (chat, message_id): 201 new, 200 duplicate, else nothing;
    a new message gets a queued turn unless `respond` is false. Fields other apps registered
    (chats.api.post_fields, e.g. `files`) are checked before anything is stored and stored
    on the new message before its turn is requested."""
    payload = read_json_object(request)
    extra = post_fields_parse(payload)
    post = parse_message_post(payload)
    if not extra:
        with post_refusals_as_api_errors():
            result, turn = api_message_post(person=person, post=post)
        return JsonResponse(_posted(result, turn, person), status=200 if result.duplicate else 201)
    with post_refusals_as_api_errors():
        result, _ = api_message_post(person=person, post=dataclasses.replace(post, respond=False))
    if result.duplicate:  # stored before, with whatever the fields stored then
        return JsonResponse(_posted(result, None, person), status=200)
    outcome = post_fields_store(result.message, extra)
    turn, turn_body = None, {}
    if post.respond and result.message.role == Message.Role.USER:
        with transaction.atomic():
            if outcome.turn_request is not None:  # e.g. held until its files are ready
                turn, turn_body = outcome.turn_request(result.message)
            else:
                turn = turn_request(message=result.message)
    body = _posted(result, turn, person) | outcome.body | turn_body
    if outcome.error is not None:
        return JsonResponse(body | {"error": outcome.error}, status=outcome.status or 400)
    return JsonResponse(body, status=201)


def _posted(result, turn, person) -> dict:
    return {
        "chat_key": result.chat.chat_key,
        "message": message_json(result.message, person=person),
        "duplicate": result.duplicate,
        "turn": turn_json(turn, person=person) if turn is not None else None,
    }


@contextmanager
def post_refusals_as_api_errors():
    """The refusals of `api_message_post` as the API's errors (403, 409), for every path
    that posts a message (this one and the upload path of the attachments app)."""
    try:
        yield
    except ChannelNotAllowed as exc:
        raise ApiError(
            403,
            "channel_not_allowed",
            f"The API writes only to the api channel; {exc} chats and their people belong "
            f'to the {exc} adapter. Leave channel out or send "api".',
            field="channel",
        ) from exc
    except NotAMember as exc:
        raise ApiError(403, "not_a_member", "You are not a member of this chat.") from exc
    except ChatKindConflict as exc:
        raise ApiError(
            409,
            "chat_kind_conflict",
            f"This chat is a {exc} chat; its kind is fixed when it is created.",
            field="chat_kind",
        ) from exc


@api_endpoint("GET")
def chat_list(request: HttpRequest, person) -> JsonResponse:
    """Lists only chats the person is a member of, newest activity first, at most `limit`."""
    limit = int_param(
        request, "limit", default=DEFAULT_PAGE_SIZE, minimum=1, maximum=settings.API_PAGE_SIZE_MAX
    )
    chats = chats_with_role(person, limit=limit)
    return JsonResponse({"chats": [chat_json(chat, role=chat.my_role) for chat in chats]})


@api_endpoint("GET")
def chat_messages(request: HttpRequest, person, chat_key: str) -> JsonResponse:
    """Pages a readable chat's history by message id; unreadable and unknown chats are 404."""
    before = int_param(request, "before", default=None, minimum=0, maximum=None)
    after = int_param(request, "after", default=None, minimum=0, maximum=None)
    limit = int_param(
        request, "limit", default=DEFAULT_PAGE_SIZE, minimum=1, maximum=settings.API_PAGE_SIZE_MAX
    )
    chat = chat_for_person(person, chat_key)
    if chat is None:
        raise not_found(UNKNOWN_CHAT)
    page = chat_messages_page(chat, before=before, after=after, limit=limit)
    next_before, next_after = page_cursors(chat, page)
    return JsonResponse(
        {
            "chat_key": chat.chat_key,
            "messages": messages_json(page, person=person),
            "next_before": next_before,
            "next_after": next_after,
        }
    )


@api_endpoint("POST")
def chat_stop(request: HttpRequest, person, chat_key: str) -> JsonResponse:
    """Stops the agent in a readable chat: its open turns and the messages whose turn is held
    for their files (they stay, with no turn); `stopped` counts them (0: nothing was going
    on). Unreadable and unknown chats are 404."""
    from chats.agent.holds import chat_stop as stop

    chat = chat_for_person(person, chat_key)
    if chat is None:
        raise not_found(UNKNOWN_CHAT)
    name = person.get_full_name() or person.get_username()
    return JsonResponse({"stopped": stop(chat=chat, reason=f"stopped by {name} (API)")})


@api_endpoint("GET")
def search(request: HttpRequest, person) -> JsonResponse:
    """Finds messages only in chats the person can read; an empty query is a 400."""
    # the search module owns its backend choice
    from chats.search import SearchQueryError, message_search

    query = request.GET.get("q", "")
    if not query.strip():
        raise bad_request("invalid_parameter", "q must contain something to search for.", field="q")
    if len(query) > SEARCH_MAX_QUERY:
        raise bad_request(
            "invalid_parameter", f"q must be at most {SEARCH_MAX_QUERY} characters.", field="q"
        )
    limit = int_param(
        request, "limit", default=SEARCH_DEFAULT_LIMIT, minimum=1, maximum=SEARCH_MAX_LIMIT
    )
    chat = None
    if chat_key := request.GET.get("chat"):
        chat = chat_for_person(person, chat_key)
        if chat is None:
            raise not_found(UNKNOWN_CHAT)
    try:
        hits = message_search(person=person, query=query, chat=chat, limit=limit)
    except SearchQueryError as exc:
        raise bad_request("invalid_query", str(exc), field="q") from exc
    return JsonResponse({"query": query, "results": search_hits_json(hits, person=person)})


@api_endpoint("GET")
def turn_detail(request: HttpRequest, person, turn_id: int) -> JsonResponse:
    """A turn of a readable chat: status, reply, usage, error; others are 404."""
    turn = turn_for_person(person, turn_id)
    if turn is None:
        raise not_found("No turn with this id is visible to you.")
    return JsonResponse({"turn": turn_json(turn, person=person)})


@csrf_exempt
def unknown_path(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """Answers every path under /api/v1/ that is not an endpoint with a JSON 404."""
    return error_response(not_found("No API endpoint at this path; see docs/API.md."))
