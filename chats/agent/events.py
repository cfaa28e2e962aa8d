"""Events of a chat, published to its channel-layer group (see docs/EVENTS.md).

Every event gets a per-chat sequence number and is appended to a short replay buffer in
Redis, atomically (one Lua script), so a subscriber that missed some (a dropped WebSocket,
an SSE client reconnecting) can ask for everything after the last number it saw.
Publishing never breaks a turn: with Redis down, events are logged and dropped, and the
stored history stays the source of truth.
"""

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from hermes_site.redis import guarded

logger = logging.getLogger(__name__)

REPLAY_LENGTH = 2000
REPLAY_TTL_SECONDS = 3600
CHANNEL_MESSAGE_TYPE = "chat.event"
# The events that end a turn (docs/EVENTS.md): nothing of it follows them.
FINAL_EVENTS = frozenset({"turn.finished", "turn.failed", "turn.interrupted"})

# ARGV[1] is the event's JSON object without its opening brace; the script prepends the
# sequence number, so the JSON is never re-encoded inside Redis. KEYS[3], when given, is the
# chat's channel-layer group: the script also counts its members, so that an event nobody
# follows skips the broadcast (half the cost of a publish). That is race-free: a subscriber
# joins the group before it reads the replay buffer, and the event is in the buffer before
# the count is taken, so whoever joins later finds it there.
_APPEND = """
local seq = redis.call('INCR', KEYS[1])
local encoded = '{"seq":' .. seq .. ',' .. ARGV[1]
redis.call('RPUSH', KEYS[2], encoded)
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[2]), -1)
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]) * 24)
local listeners = 1
if KEYS[3] then listeners = redis.call('ZCARD', KEYS[3]) end
return {encoded, listeners}
"""


# Everything after ARGV[1] in one round trip, without reading the rest of the buffer: the
# buffer holds consecutive numbers ending at the counter, so the missing events are its last
# (newest - after) entries. Returns {newest, {raw...}}; nothing to read costs one GET.
_TAIL = """
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
local missing = newest - tonumber(ARGV[1])
if missing <= 0 then return {newest, {}} end
return {newest, redis.call('LRANGE', KEYS[2], -missing, -1)}
"""


def chat_group_name(chat_id: int) -> str:
    """The channel-layer group every subscriber of a chat joins."""
    return f"chat.{chat_id}"


def person_group_name(person_id: int) -> str:
    """The channel-layer group every live connection of one person joins (any chat)."""
    return f"person.{person_id}"


def _seq_key(chat_id: int) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:events:{chat_id}:seq"


def _replay_key(chat_id: int) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:events:{chat_id}:log"


class _LoopThread:
    """One long-lived event loop per process for publishing from sync code (Celery workers,
    the CLI), so the channel layer keeps one connection pool instead of one per event."""

    def __init__(self):
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, coroutine, timeout: float):
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="hermes-events", daemon=True
                ).start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)


_loop_thread = _LoopThread()


def _group_key(group: str) -> str | None:
    """The Redis key of a channel-layer group, when the layer keeps its groups on the same
    single Redis server as the replay buffer (the only layout this project configures)."""
    layer = get_channel_layer()
    if isinstance(layer, RedisChannelLayer) and len(layer.hosts) == 1:
        return layer._group_key(group).decode()
    return None


def _group_send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        _loop_thread.run(layer.group_send(group, message), timeout=5)
    else:  # called from a thread that runs a loop already: hand over to asgiref
        async_to_sync(layer.group_send)(group, message)


ACCESS_MESSAGE_TYPE = "chat.access"


def announce_access_change(chat_id: int) -> None:
    """Tell the chat's live subscribers to check again that their person may still read it
    (someone left or was removed): the sockets of people who may not are closed. Not an
    event of the chat (no number, not replayed): it carries no content."""
    try:
        _group_send(chat_group_name(chat_id), {"type": ACCESS_MESSAGE_TYPE})
    except Exception:  # noqa: BLE001 - a reconnect checks access anyway
        logger.warning("could not announce an access change in chat %s", chat_id, exc_info=True)


SESSIONS_MESSAGE_TYPE = "person.sessions"


def announce_sessions_changed(person_id: int, *, ended_session: str | None = None) -> None:
    """Tell a person's live connections to check that their login session still holds (a
    password change, a logout): those whose session ended or no longer authenticates the
    person close. `ended_session` names a session that is ending right now, before its row
    is deleted, so its connections close without waiting for the deletion."""
    message = {"type": SESSIONS_MESSAGE_TYPE, "ended": ended_session}
    try:
        _group_send(person_group_name(person_id), message)
    except Exception:  # noqa: BLE001 - a reconnect authenticates again anyway
        logger.warning("could not announce a session change of person %s", person_id, exc_info=True)


def publish(chat_id: int, event_type: str, **data) -> dict | None:
    """Number, record and broadcast one event; returns it (with `seq`), or None if Redis failed."""
    event = {
        "type": event_type,
        "chat_id": chat_id,
        "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
        **data,
    }
    group = chat_group_name(chat_id)
    group_key = _group_key(group)
    keys = [_seq_key(chat_id), _replay_key(chat_id)] + ([group_key] if group_key else [])
    appended = guarded(
        lambda r: r.register_script(_APPEND)(
            keys=keys,
            args=[json.dumps(event, ensure_ascii=False)[1:], REPLAY_LENGTH, REPLAY_TTL_SECONDS],
        ),
        default=None,
        what="publish event",
    )
    if appended is None:
        return None  # Redis is down: the stored history stays the source of truth
    encoded, listeners = appended
    event = json.loads(encoded)
    if not listeners:
        return event
    try:
        _group_send(group, {"type": CHANNEL_MESSAGE_TYPE, "event": event})
    except Exception:  # noqa: BLE001 - subscribers catch up from the replay buffer
        logger.warning("could not broadcast %s for chat %s", event_type, chat_id, exc_info=True)
    return event


def publish_many(events: list[tuple[int, str, dict]]) -> None:
    """`publish` for many events (chat id, type, data) in one Redis round trip (a pipeline of
    the same script), then broadcast those whose chat has listeners: for a batch of new
    messages in many chats (scheduled runs). Best effort, as `publish`."""
    if not events:
        return
    encoded, groups = [], []
    for chat_id, event_type, data in events:
        event = {
            "type": event_type,
            "chat_id": chat_id,
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            **data,
        }
        group = chat_group_name(chat_id)
        group_key = _group_key(group)
        keys = [_seq_key(chat_id), _replay_key(chat_id)] + ([group_key] if group_key else [])
        encoded.append((keys, json.dumps(event, ensure_ascii=False)[1:]))
        groups.append(group)

    def append_all(client):
        script = client.register_script(_APPEND)
        pipeline = client.pipeline(transaction=False)
        for keys, body in encoded:
            script(keys=keys, args=[body, REPLAY_LENGTH, REPLAY_TTL_SECONDS], client=pipeline)
        return pipeline.execute()

    appended = guarded(append_all, default=None, what="publish events")
    if appended is None:
        return  # Redis is down: the stored history stays the source of truth
    for group, (raw, listeners) in zip(groups, appended, strict=True):
        if not listeners:
            continue
        try:
            _group_send(group, {"type": CHANNEL_MESSAGE_TYPE, "event": json.loads(raw)})
        except Exception:  # noqa: BLE001 - subscribers catch up from the replay buffer
            logger.warning("could not broadcast an event to %s", group, exc_info=True)


def events_since(chat_id: int, after_seq: int) -> list[dict]:
    """Recorded events of a chat with seq > after_seq, in order (the replay buffer is bounded);
    reads and decodes only those events, not the whole buffer."""
    tail = guarded(
        lambda r: r.register_script(_TAIL)(
            keys=[_seq_key(chat_id), _replay_key(chat_id)], args=[max(after_seq, 0)]
        ),
        default=None,
        what="replay",
    )
    if not tail:
        return []
    events = [json.loads(item) for item in tail[1]]
    return sorted((e for e in events if e["seq"] > after_seq), key=lambda e: e["seq"])


def last_seq(chat_id: int) -> int:
    value = guarded(lambda r: r.get(_seq_key(chat_id)), default=None, what="last seq")
    return int(value) if value else 0


class DeltaBatcher:
    """Collects text deltas and emits one `turn.delta` event at most every EVENT_DELTA_BATCH_MS."""

    def __init__(self, emit: Callable[[str], None], interval_ms: int | None = None):
        self._emit = emit
        self._interval = (interval_ms or settings.EVENT_DELTA_BATCH_MS) / 1000
        self._pending: list[str] = []
        self._last = time.monotonic()

    def add(self, text: str) -> None:
        self._pending.append(text)
        if time.monotonic() - self._last >= self._interval:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._emit(text)
        self._last = time.monotonic()
