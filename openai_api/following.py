"""What both /v1 answering endpoints do around a turn: land the request's messages, follow
the turn to its end, stop it when the client goes away, and say why it failed."""

import asyncio
from dataclasses import replace
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import StreamingHttpResponse
from django.utils import timezone

from chats.agent.events import FINAL_EVENTS, last_seq
from chats.agent.holds import turn_hold_poll
from chats.agent.turns import turn_stop
from chats.extras import DraftStream
from chats.models import Turn
from chats.services import IngestError
from openai_api.content_parts import ContentPartRefused, content_parts_resolve
from openai_api.errors import OpenAIError, bad_request
from openai_api.parsing import ConversationRequest
from openai_api.services import (
    STEP_SEPARATOR,
    ChatNotAllowed,
    ChatNotFound,
    Landed,
    conversation_post,
    conversation_record_reply,
    visible_answer,
)

CLIENT_GONE = "the client disconnected"
APPROVAL_RETRY_AFTER_SECONDS = 5
CHAT_NOT_FOUND = "No chat with this key is visible to you."
CHAT_NOT_ALLOWED = (
    "A personal key posts only in web rooms you are a member of and in your own OpenAI "
    "conversations, not in {} chats."
)


CONFLICT = (
    "Another request of this conversation was being stored at the same moment; "
    "send the request again."
)


def land(person, request: ConversationRequest) -> tuple[Landed, int]:
    """Store the request's new messages; the turn to follow and the event seq to follow it from.

    Two requests of one person land one after the other (`conversation_post`); should a
    constraint still refuse one (a write this code does not foresee), the client gets a 409
    it may retry (the `openai` SDK does so by itself), never a 500. The last user message's
    images and files are resolved first (a `data:` URL decoded, an URL fetched when that is
    on), outside any transaction; a refused one is a 400 (413 over a size limit) and nothing
    is stored."""
    try:
        parts = content_parts_resolve(request.parts)
        with transaction.atomic():
            landed = conversation_post(person=person, request=request, parts=parts)
            # The new turn's events are published after this commits: nothing before this
            # number belongs to it. A retry follows an earlier turn: from the buffer's start.
            after = last_seq(landed.chat.pk) if landed.new else 0
    except IntegrityError as exc:
        raise OpenAIError(
            409, CONFLICT, code="conversation_conflict", headers={"Retry-After": "1"}
        ) from exc
    except ContentPartRefused as exc:
        raise OpenAIError(exc.status, str(exc), param=exc.param, code=exc.code) from exc
    return landed, after


HOLD_POLL_SECONDS = 0.25
HOLD_SLACK_SECONDS = 10


def _hold_state(landed: Landed):
    state = turn_hold_poll(landed.trigger.pk)
    turn = outcome(state.turn_id) if state.turn_id else None
    return state, turn


async def held_turn(landed: Landed) -> Landed:
    """The request's message waits for its files (a PDF being read: `landed.held`): wait
    until its hold is released (when the files are read, or at the hold's deadline,
    ATTACHMENTS_TURN_WAIT_SECONDS, which this releases itself should the timer be late) and
    return it with the turn the release requested. `turn` stays None if none was (the
    caller answers `no_turn_error`). A client that goes away meanwhile leaves the message
    held: its turn goes as for any message, and the answer is in the conversation."""
    if not landed.held:
        return landed
    while True:
        state, turn = await sync_to_async(_hold_state)(landed)
        if not state.held:
            return replace(landed, turn=turn, held=False)
        if timezone.now() > state.deadline + timedelta(seconds=HOLD_SLACK_SECONDS):
            return replace(landed, turn=None, held=False)  # a release that keeps failing
        await asyncio.sleep(HOLD_POLL_SECONDS)


def outcome(turn_id: int) -> Turn:
    return Turn.objects.select_related("reply", "chat", "trigger").get(pk=turn_id)


def answer_of(turn: Turn, person) -> str:
    """The answer the client of `person` gets, recorded first as its conversation's new tip:
    the client may resend the conversation the moment it has the answer, before the
    worker's own `turn_finished` receiver has run (recording twice changes nothing)."""
    conversation_record_reply(turn=turn)
    return visible_answer(turn, person=person)


async def stop_turn(landed: Landed) -> None:
    await sync_to_async(turn_stop)(turn_id=landed.turn.pk, chat=landed.chat, reason=CLIENT_GONE)


def failure(event: dict, turn: Turn) -> OpenAIError:
    if event["type"] == WAITING:
        return waiting_error(event)
    if event["type"] == "turn.failed":
        return OpenAIError(502, f"The agent's model failed: {turn.error}", code="turn_failed")
    if event["type"] == "stream.closed":
        return OpenAIError(403, event["reason"], code="chat_not_readable")
    reason = turn.interrupt_reason or event.get("reason") or "interrupted"
    return OpenAIError(409, f"The turn was interrupted: {reason}.", code="turn_interrupted")


# What can go wrong before a turn is followed: the key, the body, the chat, the message.
LANDING_ERRORS = (OpenAIError, ChatNotFound, ChatNotAllowed, IngestError)


def landing_error(exc: Exception, *, param: str) -> OpenAIError:
    """The OpenAI-shaped answer to one of LANDING_ERRORS; `param` names the field holding the
    messages (`messages` or `input`) for a message the hub refuses to store."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, IngestError):
        return bad_request(str(exc), param=param)
    if isinstance(exc, ChatNotFound):
        return OpenAIError(404, CHAT_NOT_FOUND, code="chat_not_found")
    return OpenAIError(403, CHAT_NOT_ALLOWED.format(exc), code="chat_not_allowed")


def no_turn_error() -> OpenAIError:
    return OpenAIError(409, "This message was stored without a turn to answer it.")


def sse_response(events) -> StreamingHttpResponse:
    """A Server-Sent Events answer that no cache or proxy holds back."""
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


WAITING = "turn.waiting"


async def follow_to_end(landed: Landed, follow) -> tuple[dict | None, Turn]:
    """Wait for the turn's final event (stopping the turn if the client goes away meanwhile);
    that event and the turn as stored.

    A turn waiting for the person's decision on a tool call is waited for at most
    OPENAI_API_APPROVAL_WAIT_SECONDS: then the answer is that `turn.waiting` event, and the
    turn goes on waiting (the client may send the same request again to follow it)."""
    loop = asyncio.get_running_loop()
    bound = settings.OPENAI_API_APPROVAL_WAIT_SECONDS
    final, waiting, deadline = None, None, None
    try:
        while True:
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                event = await asyncio.wait_for(anext(follow), timeout)
            except StopAsyncIteration:
                break
            except TimeoutError:
                final = waiting
                break
            kind = event.get("type")
            if kind in FINAL_EVENTS or kind == "stream.closed":
                final = event
            elif kind == WAITING:
                waiting, deadline = event, loop.time() + bound
            elif kind == "turn.started" and event.get("resumed"):
                waiting, deadline = None, None
    except asyncio.CancelledError:
        await asyncio.shield(stop_turn(landed))
        raise
    finally:
        await follow.aclose()
    return final, await sync_to_async(outcome)(landed.turn.pk)


def waiting_error(event: dict) -> OpenAIError:
    """The answer to a request whose turn still waits for the person's decision."""
    reason = event.get("reason") or "a decision"
    return OpenAIError(
        409,
        f"The agent is waiting for {reason}: decide on the dashboard or in Telegram. The turn "
        "goes on; send the same request again to follow it, or stream (stream=true) to see "
        "it wait.",
        code="approval_pending",
        headers={"Retry-After": str(APPROVAL_RETRY_AFTER_SECONDS)},
    )


def is_final(event: dict) -> bool:
    return event.get("type") in FINAL_EVENTS or event.get("type") == "stream.closed"


class StreamedText:
    """The answer's text as both streams send it: each delta as it comes, a blank line
    between a tool step and the text after it (as `visible_answer` joins them), and at the
    end whatever the stored answer has beyond what was streamed.

    With `chat_id` and `person`, deltas are sent as that person reads them
    (chats.extras.draft_text: a knowledge citation `[K<id>]` names its passage only to its
    readers), an unfinished mark at a delta's end held until the next one."""

    def __init__(self, chat_id: int | None = None, person=None):
        self.sent: list[str] = []
        self.step_ended = False  # a tool step came after the text sent so far
        self.draft = DraftStream(chat_id, person) if chat_id is not None else None

    async def rendered(self, delta: str) -> list[str]:
        """What to send for one `turn.delta`, rendered for the stream's person."""
        if self.draft is not None and self.draft.needs_database(delta):
            delta = await sync_to_async(self.draft.piece)(delta)
        return self.pieces(delta) if delta else []

    def tool_started(self) -> list[str]:
        """A tool step begins: what was held is no mark after all (sent as it is)."""
        held = self.draft.flush() if self.draft is not None else ""
        pieces = self.pieces(held) if held else []
        self.step_ended = True
        return pieces

    def pieces(self, delta: str) -> list[str]:
        """What to send for one `turn.delta`."""
        pieces = [STEP_SEPARATOR, delta] if self.step_ended and self.sent else [delta]
        self.step_ended = False
        self.sent += pieces
        return pieces

    def rest(self, answer: str) -> str:
        """The end of `answer` the deltas did not send ("" when they sent it all, or when
        what they sent is not its beginning)."""
        streamed = "".join(self.sent)
        return answer[len(streamed) :] if answer.startswith(streamed) else ""
