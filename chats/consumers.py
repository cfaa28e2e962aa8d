"""WebSocket consumers of the dashboard.

`ChatConsumer` (`ws/chats/<chat_key>/`) relays one chat's events (docs/EVENTS.md) to a
browser: replay after the client's last `seq`, then live events in order, each exactly once.

Abuse bounds: a `ping` compares numbers and reads only the missing tail of the replay
buffer, at most once per WS_PING_CATCH_UP_SECONDS (in between it answers from memory); a
socket sending frames faster than its allowance (WS_FRAME_BURST, refilled at
WS_FRAMES_PER_SECOND) is closed with 4429. A socket closes with 4401 when its login session
ends (logout, a password change elsewhere, expiry noticed then).
"""

import json
import logging
import time
from importlib import import_module
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user
from django.http import HttpRequest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from chats.agent.events import (
    FINAL_EVENTS,
    chat_group_name,
    events_since,
    last_seq,
    person_group_name,
)
from chats.extras import DraftStream
from chats.selectors import chat_for_person, chat_still_readable
from chats.signals import socket_closed, socket_opened

logger = logging.getLogger(__name__)

# The chat socket's route pattern (chats.routing), as its trace span names it.
WS_ROUTE = "/ws/chats/<path:chat_key>/"
tracer = trace.get_tracer("hermes.web")

# Application close codes (4000-4999), so a page can tell "log in again" from "gone".
CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_RATE_LIMITED = 4429  # more frames than the allowance: the page reconnects after a pause
# Replies being streamed whose pieces a socket renders at once (more are rare: one per turn).
MAX_DRAFTS = 16

# Redis reads block; run them off the event loop without queueing behind database work.
_events_since = sync_to_async(events_since, thread_sensitive=False)
_last_seq = sync_to_async(last_seq, thread_sensitive=False)


def _after_from_query(query_string: bytes) -> tuple[int | None, bool]:
    """(`after`, valid): `after` is None when the client did not pass one."""
    values = parse_qs(query_string.decode("latin-1")).get("after")
    if not values:
        return None, True
    try:
        after = int(values[-1])
    except ValueError:
        return None, False
    return (after, True) if after >= 0 else (None, False)


def session_person_id(session_key: str | None) -> int | None:
    """Whom a login session authenticates now, checked as Django checks each request (the
    session exists, the person is active, the password has not changed since); else None."""
    if not session_key:
        return None
    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(request)
    return user.pk if user.is_authenticated else None


class FrameAllowance:
    """A token bucket per connection: `burst` frames at once, refilled at `rate` per second."""

    def __init__(self, burst: int, rate: float):
        self.burst = burst
        self.rate = rate
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class ChatConsumer(AsyncJsonWebsocketConsumer):
    """Sends a chat's members its events in `seq` order, each at most once, none missed that
    the replay buffer still holds; everybody else gets the same 4404 as for a missing chat."""

    chat_id: int | None = None
    group: str | None = None
    person_group: str | None = None
    last_sent: int = 0
    next_catch_up: float = 0.0
    allowance: FrameAllowance | None = None
    counted: bool = False  # socket_opened was sent: socket_closed is owed
    drafts: dict  # turn id -> DraftStream of the replies being streamed (set on connect)

    async def connect(self):
        # The connect's trace span (a no-op unless traces are on): the route pattern and
        # how it ended, never the chat key, the query string or the cookie.
        with tracer.start_as_current_span(
            f"WS {WS_ROUTE}",
            kind=SpanKind.SERVER,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            outcome = await self._connect()
            if span.is_recording():
                span.set_attributes({"http.route": WS_ROUTE, "hermes.websocket.outcome": outcome})

    async def _connect(self) -> str:
        """Accept a member's socket and catch it up; "accepted" or the close code's name."""
        self.drafts = {}
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return "unauthenticated"
        self.allowance = FrameAllowance(settings.WS_FRAME_BURST, settings.WS_FRAMES_PER_SECOND)
        chat_key = self.scope["url_route"]["kwargs"]["chat_key"]
        chat = await database_sync_to_async(chat_for_person)(user, chat_key)
        if chat is None:  # outsiders and unknown keys look the same: existence never leaks
            await self._refuse(CLOSE_NOT_FOUND)
            return "not_found"
        after, valid = _after_from_query(self.scope.get("query_string", b""))
        if not valid:
            await self._refuse(CLOSE_BAD_REQUEST, reason="after must be an integer >= 0")
            return "bad_request"

        self.chat_id = chat.pk
        self.group = chat_group_name(chat.pk)
        # Subscribed before reading the buffer, so nothing published from now on is missed;
        # live events already replayed are dropped by their seq.
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.person_group = person_group_name(user.pk)
        await self.channel_layer.group_add(self.person_group, self.channel_name)
        newest = await _last_seq(self.chat_id)
        if after is None or after > newest:
            # No `after`: only what happens from now on. An `after` beyond the newest number
            # means the numbering restarted (Redis lost its keys): resume from the new one.
            self.last_sent = newest
        else:
            self.last_sent = after
        # Accepted only now: every event published after the page sees the socket open
        # reaches it, even without `after`.
        await self.accept()
        self.counted = True
        socket_opened.send_robust(sender=ChatConsumer)
        await self._catch_up(before=None)
        return "accepted"

    async def _refuse(self, code: int, reason: str = ""):
        # Accept, then close with an application code: a refused handshake reaches the
        # browser as a bare 1006, and the page could not tell "log in" from "not found".
        await self.accept()
        await self.close(code=code, reason=reason or None)

    async def disconnect(self, code):
        if self.counted:
            self.counted = False
            socket_closed.send_robust(sender=ChatConsumer)
        await self._leave_groups()

    async def _leave_groups(self):
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None
        if self.person_group is not None:
            await self.channel_layer.group_discard(self.person_group, self.channel_name)
            self.person_group = None

    async def chat_event(self, message: dict):
        """A live event from the chat's group (`chats.agent.events.CHANNEL_MESSAGE_TYPE`)."""
        if self.group is None:
            return
        event = message.get("event") or {}
        seq = event.get("seq")
        if not isinstance(seq, int) or seq <= self.last_sent:
            return  # already sent (from the replay, or delivered twice)
        if seq > self.last_sent + 1:  # a gap in the live stream: fill it from the buffer
            await self._catch_up(before=seq)
        await self._send_in_order(event)

    async def chat_access(self, message: dict):
        """Someone lost access to the chat (`chats.agent.events.ACCESS_MESSAGE_TYPE`): if it is
        this socket's person, close it as if the chat did not exist."""
        if self.group is None:
            return
        person_id = self.scope["user"].pk
        if not await database_sync_to_async(chat_still_readable)(person_id, self.chat_id):
            await self._leave_groups()
            await self.close(code=CLOSE_NOT_FOUND)

    async def person_sessions(self, message: dict):
        """The person's login sessions changed (`chats.agent.events.SESSIONS_MESSAGE_TYPE`):
        close this socket if its session ended or no longer authenticates its person."""
        if self.group is None:
            return
        session = self.scope.get("session")
        session_key = getattr(session, "session_key", None)
        ended = message.get("ended")
        if not ended or ended != session_key:
            person_id = await database_sync_to_async(session_person_id)(session_key)
            if person_id == self.scope["user"].pk:
                return
        await self._leave_groups()
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def receive_json(self, content, **kwargs):
        if self.group is None or not isinstance(content, dict):
            return
        if content.get("type") == "ping":
            await self._pong()

    async def _pong(self):
        # Send whatever this socket has not delivered yet first, so a pong whose number
        # matches the page's last seq means "you have everything up to here". At most once
        # per interval the socket looks (one GET) and reads only the missing tail of the
        # buffer; a ping within the interval is answered from memory, so a flood of pings
        # costs neither Redis round trips nor decoding.
        now = time.monotonic()
        if now < self.next_catch_up:
            await self.send_json({"type": "pong", "last_seq": self.last_sent})
            return
        self.next_catch_up = now + settings.WS_PING_CATCH_UP_SECONDS
        newest = await _last_seq(self.chat_id)
        if newest > self.last_sent:
            await self._catch_up(before=None)
        # Beyond what the buffer still holds there is nothing more to fetch.
        await self.send_json({"type": "pong", "last_seq": max(newest, self.last_sent)})

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if self.allowance is not None and not self.allowance.take():
            if self.group is not None or self.person_group is not None:
                logger.info("closed a WebSocket that sent frames faster than its allowance")
                await self._leave_groups()
                await self.close(code=CLOSE_RATE_LIMITED)
            return
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except ValueError:  # not JSON (or binary): nothing a page sends, ignore it
            logger.debug("ignored a malformed WebSocket frame")

    @classmethod
    async def encode_json(cls, content):
        return json.dumps(content, ensure_ascii=False, default=str)

    async def send_event(self, event: dict):
        """Render one event to the socket; override to send HTML partials instead of JSON.
        A reply's streamed pieces are rendered for this socket's person (chats.extras
        `DraftStream`: knowledge's `[K<id>]` references become "[document § section]" for a
        reader, "[citation hidden]" for anyone else, never the bare reference)."""
        kind = event.get("type")
        if kind == "turn.delta":
            draft = self._draft(event.get("turn_id"))
            text = event.get("text", "")
            if draft.needs_database(text):
                event = event | {"text": await database_sync_to_async(draft.piece)(text)}
        elif kind in FINAL_EVENTS:
            self.drafts.pop(event.get("turn_id"), None)
        await self.send_json(event)

    def _draft(self, turn_id) -> DraftStream:
        drafts = self.drafts
        if turn_id not in drafts:
            while len(drafts) >= MAX_DRAFTS:  # turns whose end this socket never saw
                drafts.pop(next(iter(drafts)))
            drafts[turn_id] = DraftStream(self.chat_id, self.scope["user"])
        return drafts[turn_id]

    async def _catch_up(self, *, before: int | None):
        """Send recorded events after the last one sent (and below `before`), in order; only
        the missing tail of the buffer is read."""
        for event in await _events_since(self.chat_id, self.last_sent):
            if before is not None and event["seq"] >= before:
                break
            await self._send_in_order(event)

    async def _send_in_order(self, event: dict):
        if event["seq"] <= self.last_sent:
            return
        self.last_sent = event["seq"]
        await self.send_event(event)
