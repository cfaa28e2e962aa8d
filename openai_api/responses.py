"""`POST /v1/responses` (whole and streamed): as chat completions, with the Responses API's
shapes. `previous_response_id` continues the chat of an earlier response of the same person
(only the new input is stored there); `conversation` names a chat as `X-Hermes-Chat` does.
"""

import asyncio
import json
import uuid
from dataclasses import replace

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from chats.api.streams import KEEPALIVE, follow_turn
from openai_api.auth import personal_key_person
from openai_api.errors import OpenAIError, openai_error_response
from openai_api.following import (
    LANDING_ERRORS,
    StreamedText,
    answer_of,
    failure,
    follow_to_end,
    held_turn,
    is_final,
    land,
    landing_error,
    no_turn_error,
    outcome,
    sse_response,
    stop_turn,
)
from openai_api.models import StoredResponse
from openai_api.parsing import ResponsesRequest, conflicting_chats, parse_responses, read_json
from openai_api.render import now, response_json
from openai_api.services import Landed


def _previous_chat_key(person, parsed: ResponsesRequest) -> ResponsesRequest:
    """The request continuing the chat of its `previous_response_id` (the person's own, else
    404). The response decides the chat: a header or `metadata.chat` may name that same
    chat, another one is a 400 `conflicting_chat` (never silently one of the two)."""
    if parsed.previous_response_id is None:
        return parsed
    previous = (
        StoredResponse.objects.select_related("chat")
        .filter(response_id=parsed.previous_response_id, person=person)
        .first()
    )
    if previous is None:
        raise OpenAIError(
            404,
            f"No response {parsed.previous_response_id!r} of yours.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    named = parsed.conversation.chat_key
    if named is not None and named != previous.chat.chat_key:
        raise conflicting_chats(
            "previous_response_id", "X-Hermes-Chat (or metadata.chat)", param="previous_response_id"
        )
    conversation = replace(parsed.conversation, chat_key=previous.chat.chat_key)
    return ResponsesRequest(conversation=conversation, previous_response_id=None)


def _land_response(person, parsed: ResponsesRequest) -> tuple[Landed, int, str]:
    parsed = _previous_chat_key(person, parsed)
    landed, after = land(person, parsed.conversation)
    response_id = f"resp_{uuid.uuid4().hex}"
    _response_store(person, landed, response_id)
    return landed, after, response_id


def _response_store(person, landed: Landed, response_id: str) -> None:
    """Remember which turn answers `response_id` (once the turn exists: a message held for
    its files gets it when the hold is released)."""
    if landed.turn is not None:
        StoredResponse.objects.create(
            response_id=response_id, person=person, chat=landed.chat, turn=landed.turn
        )


async def _after_hold(person, landed: Landed, response_id: str) -> Landed:
    """The landed request once its files are read (see `held_turn`), its response stored."""
    if not landed.held:
        return landed
    landed = await held_turn(landed)
    await sync_to_async(_response_store)(person, landed, response_id)
    return landed


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponse:
    """Answers the input's last user message as the agent, whole or as response events."""
    if request.method != "POST":
        return openai_error_response(OpenAIError(405, "Use POST.", headers={"Allow": "POST"}))
    try:
        person = await sync_to_async(personal_key_person)(request)
        parsed = parse_responses(request, read_json(request))
        landed, after, response_id = await sync_to_async(_land_response)(person, parsed)
    except LANDING_ERRORS as exc:
        return openai_error_response(landing_error(exc, param="input"))
    if landed.turn is None and not landed.held:
        return openai_error_response(no_turn_error())
    if parsed.conversation.stream:
        return sse_response(_events(landed, (after, person), response_id))
    landed = await _after_hold(person, landed, response_id)
    if landed.turn is None:
        return openai_error_response(no_turn_error())
    follow = follow_turn(landed.chat.pk, landed.turn.pk, after, person.pk)
    return await _whole(landed, follow, response_id, person)


async def _whole(landed: Landed, follow, response_id: str, person) -> JsonResponse:
    created = now()
    final, turn = await follow_to_end(landed, follow)
    if final is None or final["type"] != "turn.finished" or turn.reply is None:
        return openai_error_response(failure(final or {"type": "turn.failed"}, turn))
    text = await sync_to_async(answer_of)(turn, person)
    body = response_json(
        response_id=response_id, created=created, turn=turn, text=text, status="completed"
    )
    return JsonResponse(body)


async def _events(landed: Landed, since: tuple, response_id: str):
    """The streamed response; `since`: (event seq, person) to follow the turn from."""
    created, sequence, ended, follow = now(), 0, False, None
    item_id = f"msg_{response_id[5:]}"
    after, person = since

    def event(kind: str, **fields) -> str:
        nonlocal sequence
        payload = {"type": kind, "sequence_number": sequence, **fields}
        sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"

    if landed.held:  # its files are still being read: a comment now, the events once read
        yield ": waiting for files\n\n"
        landed = await _after_hold(person, landed, response_id)
        if landed.turn is None:
            error = no_turn_error().body()["error"]
            yield event("error", message=error["message"], code=error["code"], param=None)
            return
    follow = follow_turn(landed.chat.pk, landed.turn.pk, after, person.pk)
    turn = await sync_to_async(outcome)(landed.turn.pk)

    def snapshot(status: str, text: str | None = None) -> dict:
        return response_json(
            response_id=response_id, created=created, turn=turn, text=text, status=status
        )

    item = {"type": "message", "id": item_id, "status": "in_progress", "role": "assistant"}
    part = {"type": "output_text", "text": "", "annotations": []}
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    streamed = StreamedText(landed.chat.pk, person)
    try:
        yield event("response.created", response=snapshot("in_progress"))
        yield event("response.in_progress", response=snapshot("in_progress"))
        yield event("response.output_item.added", output_index=0, item=item | {"content": []})
        yield event("response.content_part.added", **at, part=part)
        async for update in follow:
            kind = update.get("type")
            if update is KEEPALIVE:
                yield ": keep-alive\n\n"
            elif kind == "turn.delta":
                for piece in await streamed.rendered(update["text"]):
                    yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
            elif kind == "tool.started":
                for piece in streamed.tool_started():
                    yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
            elif kind == "turn.waiting":
                yield f": waiting for {update.get('reason') or 'a decision'}\n\n"
            elif is_final(update):
                ended = True
                turn = await sync_to_async(outcome)(landed.turn.pk)
                if kind != "turn.finished" or turn.reply is None:
                    error = failure(update, turn).body()["error"]
                    yield event("error", message=error["message"], code=error["code"], param=None)
                    yield event("response.failed", response=snapshot("failed"))
                    return
                text = await sync_to_async(answer_of)(turn, person)
                if rest := streamed.rest(text):
                    yield event("response.output_text.delta", **at, delta=rest, logprobs=[])
                yield event("response.output_text.done", **at, text=text, logprobs=[])
                yield event("response.content_part.done", **at, part=part | {"text": text})
                done = item | {"status": "completed", "content": [part | {"text": text}]}
                yield event("response.output_item.done", output_index=0, item=done)
                yield event("response.completed", response=snapshot("completed", text))
                return
    finally:
        if not ended:
            await asyncio.shield(stop_turn(landed))
        if follow is not None:
            await follow.aclose()
