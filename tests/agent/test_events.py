import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from chats.agent import events, interrupts
from hermes_site import redis as hub_redis


@pytest.fixture
def chat_id():
    # A chat id no other test (or parallel run) uses: events live in the shared Redis.
    return int(time.time() * 1000) % 10**9 + 10**9


def test_events_are_numbered_recorded_and_broadcast(chat_id):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(events.chat_group_name(chat_id), channel)

    first = events.publish(chat_id, "turn.started", turn_id=1, text="你好")
    second = events.publish(chat_id, "turn.delta", turn_id=1, text="hello", parts=[])
    assert second["seq"] == first["seq"] + 1
    assert events.last_seq(chat_id) == second["seq"]
    received = async_to_sync(layer.receive)(channel)
    assert received["type"] == events.CHANNEL_MESSAGE_TYPE
    assert received["event"] == first
    assert first["text"] == "你好"
    assert second["parts"] == []  # JSON is not re-encoded inside Redis
    replay = events.events_since(chat_id, first["seq"])
    assert [e["seq"] for e in replay] == [second["seq"]]
    assert events.events_since(chat_id, 0)[0]["type"] == "turn.started"


def test_an_event_nobody_follows_is_recorded_but_not_broadcast(chat_id, monkeypatch):
    real_send = events._group_send
    sent = []

    def recording_send(group, message):
        sent.append(message["event"]["seq"])
        real_send(group, message)

    monkeypatch.setattr(events, "_group_send", recording_send)
    unheard = events.publish(chat_id, "message.created", text="nobody listens")
    assert sent == []
    assert events.events_since(chat_id, 0) == [unheard]  # a later subscriber replays it

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(events.chat_group_name(chat_id), channel)
    heard = events.publish(chat_id, "message.created", text="someone listens")
    assert sent == [heard["seq"]]
    assert async_to_sync(layer.receive)(channel)["event"] == heard

    async_to_sync(layer.group_discard)(events.chat_group_name(chat_id), channel)
    events.publish(chat_id, "message.created", text="they left")
    assert sent == [heard["seq"]]


def test_delta_batcher_joins_fast_deltas():
    emitted = []
    batcher = events.DeltaBatcher(emitted.append, interval_ms=1000)
    for piece in ["a", "b", "c"]:
        batcher.add(piece)
    assert emitted == []
    batcher.flush()
    assert emitted == ["abc"]
    batcher2 = events.DeltaBatcher(emitted.append, interval_ms=10)
    time.sleep(0.02)
    batcher2.add("late")
    assert emitted[-1] == "late"


def test_interrupt_flags_cross_processes_through_redis(settings):
    turn_id = int(time.time() * 1000)
    assert interrupts.interrupt_reason(turn_id) is None
    prefix = settings.REDIS_KEY_PREFIX
    hub_redis.get_redis().set(f"{prefix}:interrupt:{turn_id}", "from another process")
    assert interrupts.interrupt_reason(turn_id) == "from another process"
    interrupts.clear_interrupt(turn_id)
    assert interrupts.interrupt_reason(turn_id) is None


def test_dead_redis_degrades_quickly_and_quietly(settings, chat_id, caplog):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nobody listens on port 1
    started = time.monotonic()
    assert events.publish(chat_id, "turn.delta", text="x") is None
    for _ in range(50):
        events.publish(chat_id, "turn.delta", text="x")
        assert interrupts.interrupt_reason(123) is None
    assert events.events_since(chat_id, 0) == []
    assert time.monotonic() - started < 3
    warnings = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
    assert len(warnings) == 1
    # An in-process interrupt still works without Redis.
    interrupts.request_interrupt(123, "stop")
    assert interrupts.interrupt_reason(123) == "stop"
    interrupts.clear_interrupt(123)
