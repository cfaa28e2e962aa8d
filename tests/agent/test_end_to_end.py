"""The whole engine path with real processes: HTTP POST to daphne → Celery worker on Redis →
fake model over HTTP/SSE → reply stored → events on the channel layer and over SSE."""

import json
import time
import urllib.request

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from chats.agent.events import chat_group_name
from chats.models import ChatMember, Message, Turn
from chats.services import api_token_create, chat_get_or_create, chat_member_ensure
from tests.fakes import openai_server as fake_openai

pytestmark = pytest.mark.timeout(180)


def post(stack, token, payload):
    request = urllib.request.Request(
        f"{stack.url}/api/v1/messages",
        data=json.dumps(payload).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


def get(stack, token, path):
    request = urllib.request.Request(
        f"{stack.url}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    return urllib.request.urlopen(request, timeout=30)


def wait_for_turn(turn_id, statuses, timeout=30.0) -> Turn:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        turn = Turn.objects.get(pk=turn_id)
        if turn.status in statuses:
            return turn
        time.sleep(0.1)
    raise AssertionError(f"turn {turn_id} still {Turn.objects.get(pk=turn_id).status}")


@pytest.fixture
def room(make_person):
    person = make_person("alice")
    chat, _ = chat_get_or_create(channel="api", chat_id="ops", title="Ops")
    chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
    _, token = api_token_create(person=person)
    return chat, token


def test_http_post_runs_a_turn_on_a_real_worker_and_publishes_events(live_stack, fake_llm, room):
    chat, token = room
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(chat_group_name(chat.pk), channel)
    fake_llm.script(fake_openai.text("Deploys happen on Tuesdays after the standup."))

    status, body = post(
        live_stack,
        token,
        {
            "chat_id": "ops",
            "user_id": "u1",
            "user_name": "Alice",
            "message_id": "m-1",
            "text": "When do we deploy?",
        },
    )
    assert status == 201 and body["turn"]["status"] == "queued"
    turn = wait_for_turn(body["turn"]["id"], {"completed", "failed"})
    assert turn.status == "completed", turn.error
    reply = Message.objects.get(pk=turn.reply_id)
    assert reply.text == "Deploys happen on Tuesdays after the standup."
    assert fake_llm.last_request["messages"][-1]["content"] == "When do we deploy?"

    events = []
    while not events or events[-1]["type"] != "turn.finished":
        events.append(async_to_sync(layer.receive)(channel)["event"])
    types = [event["type"] for event in events]
    assert types[0] == "message.created" and "turn.started" in types
    assert [e["seq"] for e in events] == list(
        range(events[0]["seq"], events[0]["seq"] + len(events))
    )
    streamed = "".join(e["text"] for e in events if e["type"] == "turn.delta")
    assert streamed == reply.text

    detail = json.loads(get(live_stack, token, f"/api/v1/turns/{turn.pk}").read())["turn"]
    assert detail["status"] == "completed" and detail["reply"]["text"] == reply.text
    assert detail["usage"]["completion_tokens"] > 0

    # The SSE stream replays the turn's events, each once, in order, and closes at the end.
    stream = get(live_stack, token, f"/api/v1/turns/{turn.pk}/events").read().decode()
    sse_types = [line[7:] for line in stream.splitlines() if line.startswith("event: ")]
    assert sse_types[0] == "turn.started" and sse_types[-1] == "turn.finished"
    ids = [int(line[4:]) for line in stream.splitlines() if line.startswith("id: ")]
    assert ids == sorted(set(ids))

    # A duplicate POST is stored once and starts no second turn.
    status, again = post(
        live_stack,
        token,
        {"chat_id": "ops", "user_id": "u1", "message_id": "m-1", "text": "When do we deploy?"},
    )
    assert status == 200 and again["duplicate"] and again["turn"] is None
    assert Turn.objects.count() == 1


def test_sse_streams_live_while_the_turn_runs(live_stack, fake_llm, room):
    _, token = room
    fake_llm.script(fake_openai.text("one two three four five six", delay=0.15))
    _, body = post(
        live_stack,
        token,
        {"chat_id": "ops", "user_id": "u1", "message_id": "m-2", "text": "count"},
    )
    started = time.monotonic()
    response = get(live_stack, token, f"/api/v1/turns/{body['turn']['id']}/events")
    first_delta_at = None
    text = []
    for raw in response:
        line = raw.decode().rstrip("\n")
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event["type"] == "turn.delta":
                first_delta_at = first_delta_at or time.monotonic()
                text.append(event["text"])
            if event["type"] == "turn.finished":
                break
    assert "".join(text) == "one two three four five six"
    # Deltas arrived while the model was still streaming, not all at the end.
    assert first_delta_at - started < time.monotonic() - started - 0.3


def test_sse_closes_when_the_person_loses_access_to_the_chat(live_stack, fake_llm, room):
    chat, token = room
    words = " ".join(f"w{i}" for i in range(40))
    fake_llm.script(fake_openai.text(words, delay=0.1))
    _, body = post(
        live_stack,
        token,
        {"chat_id": "ops", "user_id": "u1", "message_id": "m-3", "text": "talk"},
    )
    response = get(live_stack, token, f"/api/v1/turns/{body['turn']['id']}/events")
    seen = []
    for raw in response:
        line = raw.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        seen.append(event["type"])
        if event["type"] == "turn.delta" and seen.count("turn.delta") == 1:
            ChatMember.objects.filter(chat=chat).delete()  # alice leaves the room
        if event["type"] == "stream.closed":
            assert event["reason"] == "You no longer have access to this chat."
    assert seen[-1] == "stream.closed", seen
    assert "turn.finished" not in seen
    assert response.read() == b""  # the server ended the stream


def test_a_worker_killed_mid_turn_leaves_it_interrupted_not_rerun(live_stack, fake_llm, room):
    chat, token = room
    fake_llm.script(fake_openai.text("slow " * 400, delay=0.05), fake_openai.text("fresh answer"))
    _, body = post(
        live_stack,
        token,
        {"chat_id": "ops", "user_id": "u1", "message_id": "m-3", "text": "long task"},
    )
    turn_id = body["turn"]["id"]
    wait_for_turn(turn_id, {"running"})
    fake_llm.wait_for_requests(1, timeout=15)
    live_stack.kill_worker()
    assert Turn.objects.get(pk=turn_id).status == "running"

    live_stack.start_worker()  # same worker name: it recovers its dead turn at start
    turn = wait_for_turn(turn_id, {"interrupted"}, timeout=30)
    assert "restarted" in turn.interrupt_reason or "lease" in turn.interrupt_reason

    _, body = post(
        live_stack,
        token,
        {"chat_id": "ops", "user_id": "u1", "message_id": "m-4", "text": "are you back?"},
    )
    answered = wait_for_turn(body["turn"]["id"], {"completed", "failed"})
    assert answered.status == "completed"
    assert Message.objects.get(pk=answered.reply_id).text == "fresh answer"
    time.sleep(1)
    assert len(fake_llm.requests) == 2, "the dead turn must not be run again"
    assert Turn.objects.get(pk=turn_id).status == "interrupted"
