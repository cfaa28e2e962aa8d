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
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from chats.agent.events import last_seq
from chats.agent.turns import turn_stop
from chats.api.streams import FINAL_EVENTS, KEEPALIVE, follow_turn
from chats.models import Turn
from chats.services import IngestError
from openai_api.auth import personal_key_person
from openai_api.errors import OpenAIError, bad_request, openai_error_response
from openai_api.parsing import parse_chat_completion, read_json
from openai_api.render import (
    chunk_json,
    completion_json,
    now,
    usage_chunk_json,
)
from openai_api.services import ChatNotAllowed, ChatNotFound, Landed, conversation_post

CLIENT_GONE = "the client disconnected"
CHAT_NOT_FOUND = "No chat with this key is visible to you."
CHAT_NOT_ALLOWED = (
    "A personal key posts only in web rooms you are a member of and in your own OpenAI "
    "conversations, not in {} chats."
)


def _land(person, request) -> tuple[Landed, int]:
    """Store the request's new messages; the turn to follow and the event seq to follow it from."""
    with transaction.atomic():
        landed = conversation_post(person=person, request=request)
        # The new turn's events are published after this commits: nothing before this number
        # belongs to it. A retry follows an earlier turn: from the start of the buffer.
        after = last_seq(landed.chat.pk) if landed.new else 0
    return landed, after


def _outcome(turn_id: int) -> Turn:
    return Turn.objects.select_related("reply", "chat").get(pk=turn_id)


async def _stop(landed: Landed) -> None:
    await sync_to_async(turn_stop)(turn_id=landed.turn.pk, chat=landed.chat, reason=CLIENT_GONE)


def _failure(event: dict, turn: Turn) -> OpenAIError:
    if event["type"] == "turn.failed":
        return OpenAIError(502, f"The agent's model failed: {turn.error}", code="turn_failed")
    if event["type"] == "stream.closed":
        return OpenAIError(403, event["reason"], code="chat_not_readable")
    reason = turn.interrupt_reason or event.get("reason") or "interrupted"
    return OpenAIError(409, f"The turn was interrupted: {reason}.", code="turn_interrupted")


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """Answers the conversation's last user message as the agent, whole or streamed."""
    if request.method != "POST":
        error = OpenAIError(405, "Use POST.", headers={"Allow": "POST"})
        return openai_error_response(error)
    try:
        person = await sync_to_async(personal_key_person)(request)
        conversation = parse_chat_completion(request, read_json(request))
        landed, after = await sync_to_async(_land)(person, conversation)
    except OpenAIError as error:
        return openai_error_response(error)
    except ChatNotFound:
        return openai_error_response(OpenAIError(404, CHAT_NOT_FOUND, code="chat_not_found"))
    except ChatNotAllowed as exc:
        message = CHAT_NOT_ALLOWED.format(exc)
        return openai_error_response(OpenAIError(403, message, code="chat_not_allowed"))
    except IngestError as exc:
        return openai_error_response(bad_request(str(exc), param="messages"))
    if landed.turn is None:
        error = OpenAIError(409, "This message was stored without a turn to answer it.")
        return openai_error_response(error)
    completion_id = f"chatcmpl-hermes-{landed.turn.pk}-{uuid.uuid4().hex[:8]}"
    follow = follow_turn(landed.chat.pk, landed.turn.pk, after, person.pk)
    if conversation.stream:
        chunks = _chunks(landed, follow, completion_id, conversation.include_usage)
        response = StreamingHttpResponse(chunks, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    return await _whole(landed, follow, completion_id)


async def _whole(landed: Landed, follow, completion_id: str) -> JsonResponse:
    final = None
    try:
        async for event in follow:
            if event.get("type") in FINAL_EVENTS or event.get("type") == "stream.closed":
                final = event
    except asyncio.CancelledError:
        await asyncio.shield(_stop(landed))
        raise
    finally:
        await follow.aclose()
    turn = await sync_to_async(_outcome)(landed.turn.pk)
    if final is None or final["type"] != "turn.finished" or turn.reply is None:
        return openai_error_response(_failure(final or {"type": "turn.failed"}, turn))
    body = completion_json(
        completion_id=completion_id, created=now(), text=turn.reply.text, turn=turn
    )
    return JsonResponse(body)


def _data(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def _chunks(landed: Landed, follow, completion_id: str, include_usage: bool):
    created = now()
    ended = False

    def chunk(delta: dict, **fields) -> str:
        return _data(
            chunk_json(completion_id=completion_id, created=created, delta=delta, **fields)
        )

    sent: list[str] = []
    try:
        yield chunk({"role": "assistant", "content": ""})
        async for event in follow:
            kind = event.get("type")
            if event is KEEPALIVE:
                yield ": keep-alive\n\n"
            elif kind == "turn.delta":
                sent.append(event["text"])
                yield chunk({"content": event["text"]})
            elif kind == "turn.waiting":
                reason = event.get("reason") or "a decision"
                # A comment for raw SSE readers, and a chunk without content that says it.
                yield f": waiting for {reason}\n\n"
                extra = {"hermes": {"status": "waiting", "reason": reason}}
                yield chunk({}, extra=extra)
            elif kind == "turn.started" and event.get("resumed"):
                yield chunk({}, extra={"hermes": {"status": "resumed"}})
            elif kind in FINAL_EVENTS or kind == "stream.closed":
                ended = True
                turn = await sync_to_async(_outcome)(landed.turn.pk)
                if kind != "turn.finished" or turn.reply is None:
                    yield _data(_failure(event, turn).body())
                else:
                    text, streamed = turn.reply.text, "".join(sent)
                    if text != streamed and text.startswith(streamed):
                        yield chunk({"content": text[len(streamed) :]})
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
        if not ended:  # the client went away (or the server is stopping): stop the turn
            await asyncio.shield(_stop(landed))
        await follow.aclose()
