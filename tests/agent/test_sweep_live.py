"""The sweep for real: a Celery worker with embedded beat (`worker -B`, as `make run` starts
it) answers turns whose task never reached Redis (the enqueue failed, or Redis restarted
empty), in `queue` busy mode too, and their SSE streams end with the final event."""

import os
import time
import urllib.request

import pytest

from chats.agent.turns import message_received
from chats.models import BusyMode, ChatMember, Message, Turn
from chats.services import api_token_create, chat_get_or_create, chat_member_ensure, message_ingest
from tests.fakes import openai_server as fake_openai

pytestmark = [pytest.mark.timeout(180), pytest.mark.storage]


@pytest.fixture
def stack_with_beat(transactional_db, fake_llm, settings, tmp_path):
    from django.conf import global_settings

    from tests.live import BIN, START_BOUND_SECONDS, LiveStack

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    stack = LiveStack(
        llm_base_url=fake_llm.base_url,
        worker_name=f"beat-{os.getpid()}@%h",
        extra_env={"TURN_SWEEP_SECONDS": "1", "TURN_REQUEUE_AFTER_SECONDS": "0"},
    )
    try:
        stack.start_web()
        stack.worker = stack._spawn(
            "worker",
            [
                str(BIN / "celery"),
                "-A",
                "hermes_site",
                "worker",
                "-B",
                "-s",
                str(tmp_path / "celerybeat-schedule"),
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "-Q",
                settings.REDIS_KEY_PREFIX,
                "-n",
                stack.worker_name,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )
        stack.wait_for_log("worker", "ready", START_BOUND_SECONDS)
        yield stack
    finally:
        stack.stop()


def wait_for(turn_id, statuses, timeout=60.0) -> Turn:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        turn = Turn.objects.get(pk=turn_id)
        if turn.status in statuses:
            return turn
        time.sleep(0.2)
    raise AssertionError(f"turn {turn_id} still {Turn.objects.get(pk=turn_id).status}")


def test_queued_turns_without_a_task_are_answered_and_their_streams_end(
    stack_with_beat, fake_llm, make_person
):
    person = make_person("alice")
    chat, _ = chat_get_or_create(channel="api", chat_id="ops", title="Ops")
    chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
    _, token = api_token_create(person=person)
    chat.busy_mode = BusyMode.QUEUE
    chat.save(update_fields=["busy_mode"])
    fake_llm.script(fake_openai.text("First answer."), fake_openai.text("Second answer."))
    turns = []
    for text in ("one", "two"):
        result = message_ingest(channel="api", chat_id="ops", user_id="u1", text=text)
        turns.append(message_received(result, enqueue=False))  # no task, as after a failure
    assert turns[0].chat_id == chat.pk

    request = urllib.request.Request(
        f"{stack_with_beat.url}/api/v1/turns/{turns[1].pk}/events",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=90) as response:
        body = response.read().decode()  # returns only when the stream ends
    last = [block for block in body.split("\n\n") if block.strip()][-1]
    assert "event: turn.finished" in last and "Second answer." in last

    for turn in turns:
        assert wait_for(turn.pk, Turn.FINISHED).status == Turn.Status.COMPLETED
    replies = Message.objects.filter(chat=chat, role="assistant").order_by("id")
    assert [m.text for m in replies] == ["First answer.", "Second answer."]
    assert len(fake_llm.requests) == 2  # each turn ran once
