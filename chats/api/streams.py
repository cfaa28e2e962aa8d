"""`GET /api/v1/turns/<id>/events`: a turn's events as Server-Sent Events.

The stream subscribes to the chat's channel-layer group first, then replays what the turn
already published (from the Redis replay buffer, after `Last-Event-ID` or `?after=` when
given), then relays live events in `seq` order without duplicates, and closes after the
turn's final event (or, should the person lose access to the chat meanwhile, after a
`stream.closed` event). Each SSE message has `id: <seq>`, `event: <type>` and the event as
JSON `data`. A turn that finished longer ago than the buffer keeps gets one final event
built from the database. Comments (`: keep-alive`) are sent every 15 s of silence.

Texts are sent as the token's person reads them (chats.extras: a knowledge citation names
its passage only to a reader of the collection): each `turn.delta` (an unfinished mark at
its end held for the next one) and the message of a final event, as the history shows it.
"""

import asyncio
import json

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from chats.agent.events import ACCESS_MESSAGE_TYPE, FINAL_EVENTS, chat_group_name, events_since
from chats.api.auth import authenticate
from chats.api.errors import ApiError, error_response, not_found
from chats.api.ratelimit import rate_limit_check
from chats.extras import DraftStream, message_text
from chats.models import Message, Turn
from chats.payloads import message_payload
from chats.selectors import chat_still_readable, turn_for_person

KEEPALIVE_SECONDS = 15


def _authorize(request: HttpRequest, turn_id: int) -> tuple[Turn, object]:
    token = authenticate(request)
    rate_limit_check(token)
    turn = turn_for_person(token.person, turn_id)
    if turn is None:
        raise not_found("No turn with this id is visible to you.")
    return turn, token.person


def _sse(event: dict) -> str:
    data = json.dumps(event, ensure_ascii=False, default=str)
    seq = f"id: {event['seq']}\n" if "seq" in event else ""
    return f"{seq}event: {event['type']}\ndata: {data}\n\n"


def _final_from_database(turn_id: int) -> dict | None:
    turn = Turn.objects.select_related("reply__actor").filter(pk=turn_id).first()
    if turn is None or not turn.is_finished:
        return None
    reply = message_payload(turn.reply) if turn.reply else None
    kind = "turn.finished" if turn.status == Turn.Status.COMPLETED else f"turn.{turn.status}"
    event = {"type": kind, "turn_id": turn.pk, "message": reply}
    if turn.status == Turn.Status.FAILED:
        event["error"] = turn.error
    if turn.status == Turn.Status.INTERRUPTED:
        event["reason"] = turn.interrupt_reason
    return event


def _after_seq(request: HttpRequest) -> int:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    try:
        return max(int(raw), 0)
    except ValueError:
        raise ApiError(400, "invalid_parameter", "after must be an integer.") from None


@csrf_exempt
async def turn_events(request: HttpRequest, turn_id: int) -> HttpResponse:
    """Streams one turn's events in order, exactly once each, ending with its final event."""
    if request.method != "GET":
        return error_response(
            ApiError(405, "method_not_allowed", "Use GET.", headers={"Allow": "GET"})
        )
    try:
        turn, person = await sync_to_async(_authorize)(request, turn_id)
        after = _after_seq(request)
    except ApiError as error:
        return error_response(error)
    response = StreamingHttpResponse(
        _stream(turn.chat_id, turn.pk, after, person), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


KEEPALIVE = {"type": "keep-alive"}


async def _stream(chat_id: int, turn_id: int, after: int, person):
    draft = DraftStream(chat_id, person)
    async for event in follow_turn(chat_id, turn_id, after, person.pk):
        if event is KEEPALIVE:
            yield ": keep-alive\n\n"
            continue
        if event.get("type") == "turn.delta" and draft.needs_database(event.get("text", "")):
            event = event | {"text": await sync_to_async(draft.piece)(event["text"])}
        elif isinstance(event.get("message"), dict):
            event = event | {"message": await sync_to_async(_for_reader)(event["message"], person)}
        yield _sse(event)


def _for_reader(payload: dict, person) -> dict:
    """A message payload of an event with its text as `person` reads it in the history."""
    if payload.get("role") != Message.Role.TOOL and "[" not in (payload.get("text") or ""):
        return payload  # nothing any renderer changes (the common case: no query)
    message = Message.objects.filter(pk=payload.get("id")).first()
    if message is None:
        return payload
    return payload | {"text": message_text(message, person, links=True)}


async def follow_turn(chat_id: int, turn_id: int, after: int, person_id: int):
    """One turn's events after `after`, in order, exactly once each, ending with its final
    event (or `stream.closed` once the person may no longer read the chat); `KEEPALIVE`
    after every KEEPALIVE_SECONDS of silence. Shared by this stream and the OpenAI-compatible
    endpoint (`openai_api`)."""
    layer = get_channel_layer()
    group = chat_group_name(chat_id)
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    last = after
    try:
        # Subscribed first, so nothing published from now on can be missed; replay the rest.
        for event in await sync_to_async(events_since)(chat_id, last):
            last = event["seq"]
            if event.get("turn_id") == turn_id:
                yield event
                if event["type"] in FINAL_EVENTS:
                    return
        final = await sync_to_async(_final_from_database)(turn_id)
        if final is not None:
            yield final
            return
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield KEEPALIVE
                final = await sync_to_async(_final_from_database)(turn_id)
                if final is not None:  # its final event came and went while we were away
                    yield final
                    return
                continue
            if message.get("type") == ACCESS_MESSAGE_TYPE:
                if not await sync_to_async(chat_still_readable)(person_id, chat_id):
                    closed = {"type": "stream.closed", "turn_id": turn_id}
                    yield closed | {"reason": "You no longer have access to this chat."}
                    return
                continue
            event = message.get("event", {})
            if event.get("seq", 0) <= last:
                continue  # already sent from the replay
            if event["seq"] > last + 1:  # a gap in the live stream: fill it from the buffer
                missed = await sync_to_async(events_since)(chat_id, last)
                batch = [e for e in missed if e["seq"] < event["seq"]] + [event]
            else:
                batch = [event]
            for item in batch:
                last = item["seq"]
                if item.get("turn_id") == turn_id:
                    yield item
                    if item["type"] in FINAL_EVENTS:
                        return
    finally:
        await layer.group_discard(group, channel)
