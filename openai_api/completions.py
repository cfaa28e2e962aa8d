"""`POST /v1/chat/completions`: the person's message lands in a chat, the agent's turn runs
in a worker as any other, and the answer is followed through the turn's events (the same
ones the dashboard and the API v1 stream follow), then given back in OpenAI's format:
whole, or as `chat.completion.chunk` Server-Sent Events ending with `data: [DONE]`.

A client that goes away (its connection closes) stops the turn, as the Stop button does.
"""

import asyncio
import json
import uuid

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
from openai_api.parsing import parse_chat_completion, read_json
from openai_api.render import (
    chunk_json,
    completion_json,
    now,
    usage_chunk_json,
)
from openai_api.services import Landed


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """Answers the conversation's last user message as the agent, whole or streamed."""
    if request.method != "POST":
        error = OpenAIError(405, "Use POST.", headers={"Allow": "POST"})
        return openai_error_response(error)
    try:
        person = await sync_to_async(personal_key_person)(request)
        conversation = parse_chat_completion(request, read_json(request))
        landed, after = await sync_to_async(land)(person, conversation)
    except LANDING_ERRORS as exc:
        return openai_error_response(landing_error(exc, param="messages"))
    if landed.turn is None and not landed.held:
        return openai_error_response(no_turn_error())
    ref = landed.turn.pk if landed.turn is not None else f"m{landed.trigger.pk}"
    completion_id = f"chatcmpl-hermes-{ref}-{uuid.uuid4().hex[:8]}"
    if conversation.stream:
        follow = (
            None if landed.held else follow_turn(landed.chat.pk, landed.turn.pk, after, person.pk)
        )
        return sse_response(
            _chunks(landed, follow, completion_id, conversation.include_usage, (after, person))
        )
    landed = await held_turn(landed)  # its files are read first (or the bound passes)
    if landed.turn is None:
        return openai_error_response(no_turn_error())
    follow = follow_turn(landed.chat.pk, landed.turn.pk, after, person.pk)
    return await _whole(landed, follow, completion_id, person)


async def _whole(landed: Landed, follow, completion_id: str, person) -> JsonResponse:
    final, turn = await follow_to_end(landed, follow)
    if final is None or final["type"] != "turn.finished" or turn.reply is None:
        return openai_error_response(failure(final or {"type": "turn.failed"}, turn))
    text = await sync_to_async(answer_of)(turn, person)
    body = completion_json(completion_id=completion_id, created=now(), text=text, turn=turn)
    return JsonResponse(body)


def _data(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def _chunks(
    landed: Landed, follow, completion_id: str, include_usage: bool, since: tuple = ()
):
    """The streamed answer: `follow` follows the turn; for a message held for its files
    (no turn yet, `follow` None) the turn is followed from `since` (event seq, person), the
    person whose key asked (whom the answer is rendered for)."""
    created = now()
    ended = False

    def chunk(delta: dict, **fields) -> str:
        return _data(
            chunk_json(completion_id=completion_id, created=created, delta=delta, **fields)
        )

    after, person = since or (0, None)
    text = StreamedText(landed.chat.pk, person)
    try:
        yield chunk({"role": "assistant", "content": ""})
        if landed.held:  # its files are still being read: say so, then follow the turn
            yield ": waiting for files\n\n"
            yield chunk({}, extra={"hermes": {"status": "waiting", "reason": "files"}})
            landed = await held_turn(landed)
            if landed.turn is None:
                ended = True
                yield _data(no_turn_error().body())
                yield "data: [DONE]\n\n"
                return
            yield chunk({}, extra={"hermes": {"status": "resumed"}})
            follow = follow_turn(landed.chat.pk, landed.turn.pk, after, person.pk)
        async for event in follow:
            kind = event.get("type")
            if event is KEEPALIVE:
                yield ": keep-alive\n\n"
            elif kind == "turn.delta":
                for piece in await text.rendered(event["text"]):
                    yield chunk({"content": piece})
            elif kind == "tool.started":
                for piece in text.tool_started():
                    yield chunk({"content": piece})
            elif kind == "turn.waiting":
                reason = event.get("reason") or "a decision"
                # A comment for raw SSE readers, and a chunk without content that says it.
                yield f": waiting for {reason}\n\n"
                extra = {"hermes": {"status": "waiting", "reason": reason}}
                yield chunk({}, extra=extra)
            elif kind == "turn.started" and event.get("resumed"):
                yield chunk({}, extra={"hermes": {"status": "resumed"}})
            elif is_final(event):
                ended = True
                turn = await sync_to_async(outcome)(landed.turn.pk)
                if kind != "turn.finished" or turn.reply is None:
                    yield _data(failure(event, turn).body())
                else:
                    rest = text.rest(await sync_to_async(answer_of)(turn, person))
                    if rest:
                        yield chunk({"content": rest})
                    yield chunk({}, finish_reason="stop")
                    if include_usage:
                        yield _data(
                            usage_chunk_json(
                                completion_id=completion_id, created=created, turn=turn
                            )
                        )
                yield "data: [DONE]\n\n"
                return
    finally:
        # The client went away (or the server is stopping): stop the turn (one still held
        # for its files goes on; its answer is in the conversation).
        if not ended and landed.turn is not None:
            await asyncio.shield(stop_turn(landed))
        if follow is not None:
            await follow.aclose()
