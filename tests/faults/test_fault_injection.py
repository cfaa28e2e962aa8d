"""Fault injection against `make run` itself (issue #11): the supervisor with daphne and a
prefork Celery worker (beat inside), a Valkey the test kills and restarts, the fake model
streaming slow replies.

Each scenario checks what a user would notice: every message they posted is kept, no turn
runs twice (one turn, at most one reply, at most one model request per message), every
chat answers again within 60 s of the recovery, and no process stays dead. The figures
(time to answer after recovery, counts) go to var/test-logs/fault-figures.jsonl and into
docs/RELIABILITY.md.
"""

import os
import re
import signal
import time
import uuid
from http.cookiejar import CookieJar
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, build_opener

import pytest
from django.conf import global_settings

from chats.models import ChatMember, Message, Turn
from chats.services import api_token_create, chat_get_or_create, chat_member_ensure
from tests.fakes import openai_server as fake_openai
from tests.faults.api import wait_for_turn
from tests.faults.stack import (
    SLOW,
    assert_kept_and_run_once,
    model_reply,
    record_figures,
    start_supervised_stack,
    wait_answered,
)

pytestmark = pytest.mark.timeout(900)

WORKER_KILLS = 20
REDIS_RESTARTS = 5
PASSWORD = "a-long-fault-password-1"


@pytest.fixture
def person(transactional_db, settings, django_user_model):
    # The subprocesses use the real password hashers: the person must log in there.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    return django_user_model.objects.create_user(username="faulty", password=PASSWORD)


@pytest.fixture
def stack(request, person, fake_llm, owned_valkey, tmp_path):
    fake_llm.default = model_reply
    _, token = api_token_create(person=person, name="faults")
    env = getattr(request, "param", {})
    stack = start_supervised_stack(
        tmp_path=tmp_path, fake_llm=fake_llm, valkey=owned_valkey, token=token, **env
    )
    try:
        yield stack
    finally:
        leftovers = stack.run.stop()
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"


def wait_streaming(fake_llm, text: str) -> None:
    """Until the model has been asked to answer `text` (its reply is streaming from then)."""
    fake_llm.wait_until(
        lambda fake: any(fake_openai.last_user_text(b) == text for b in fake.requests), 30
    )


# A message posted in the instant the worker dies can be handed by Redis to the dying
# process (kombu pops with BRPOP and records a message as unacknowledged only once it has
# read it): its turn stays queued until the sweep enqueues it again. At the defaults that is
# 30-45 s (measured, docs/RELIABILITY.md); a quicker sweep here keeps the 20 kills short.
FAST_SWEEP = {"TURN_SWEEP_SECONDS": "2", "TURN_REQUEUE_AFTER_SECONDS": "5"}


@pytest.mark.parametrize("stack", [FAST_SWEEP], indirect=True, ids=["fast-sweep"])
def test_the_worker_killed_mid_reply_20_times(stack, fake_llm):
    after_ready, after_kill = [], []
    started = time.monotonic()
    for i in range(WORKER_KILLS):
        chat = f"kill-{i % 4}"
        slow = f"{SLOW} reply please, round {i}"
        status, body = stack.post(chat, f"kill-{i}-slow", slow)
        assert status == 201, body
        killed_turn = body["turn"]["id"]
        wait_for_turn(killed_turn, {"running"}, timeout=60)
        wait_streaming(fake_llm, slow)

        worker = stack.run.pid("worker")
        mark = stack.run.mark()
        killed_at = time.monotonic()
        os.kill(worker, signal.SIGKILL)  # the worker's main process, mid-reply
        # Posted while no worker runs: queued in Redis, answered once the worker is back.
        status, body = stack.post(chat, f"kill-{i}-after", f"are you back, round {i}?")
        assert status == 201, body

        stack.run.wait_for(rf"worker \(pid {worker}\) exited with signal 9", 30, mark)
        stack.wait_worker_ready(mark)
        ready_at = time.monotonic()
        _, answered_at = wait_answered(body["turn"]["id"], timeout=60)
        after_ready.append(answered_at - ready_at)
        after_kill.append(answered_at - killed_at)
        # The killed turn is over and is not run again.
        assert Turn.objects.get(pk=killed_turn).status == Turn.Status.INTERRUPTED

    counts = assert_kept_and_run_once(stack, fake_llm)
    stack.assert_all_running()
    assert len(stack.exits("worker")) == WORKER_KILLS
    assert stack.exits("web") == []
    record_figures(
        "worker SIGKILL mid-reply",
        after_ready,
        kill_to_answer_median_s=round(sorted(after_kill)[len(after_kill) // 2], 2),
        kill_to_answer_max_s=round(max(after_kill), 2),
        sweep=FAST_SWEEP,
        worker_restarts=len(stack.exits("worker")),
        scenario_seconds=round(time.monotonic() - started),
        requeued_by_sweep=stack.requeued(),
        **counts,
    )


def test_redis_restarted_mid_reply_5_times(stack, fake_llm):
    after_recovery = []
    for i in range(REDIS_RESTARTS):
        chat = f"redis-{i}"
        slow = f"{SLOW} reply please, restart {i}"
        status, body = stack.post(chat, f"redis-{i}-slow", slow)
        assert status == 201, body
        streaming_turn = body["turn"]["id"]
        wait_for_turn(streaming_turn, {"running"}, timeout=60)
        wait_streaming(fake_llm, slow)

        stack.valkey.restart(crash=True, down_seconds=1.0)  # SIGKILL, 1 s down, same data
        back_at = time.monotonic()
        status, body = stack.post(chat, f"redis-{i}-after", f"still there, restart {i}?")
        assert status == 201, body
        _, answered_at = wait_answered(body["turn"]["id"], timeout=60)
        after_recovery.append(answered_at - back_at)
        streamed = Turn.objects.get(pk=streaming_turn)
        # It finished, or the newer message interrupted it (the chat's busy mode): never both
        # still running, never run again.
        assert streamed.status in (Turn.Status.COMPLETED, Turn.Status.INTERRUPTED)

    counts = assert_kept_and_run_once(stack, fake_llm)
    stack.assert_all_running()
    # Nothing had to be restarted: the worker and daphne ride through a Redis restart.
    assert stack.exits("worker") == [] and stack.exits("web") == []
    assert not [line for line in stack.run.lines if "Unrecoverable" in line]
    record_figures(
        "Redis restart mid-reply", after_recovery, requeued_by_sweep=stack.requeued(), **counts
    )


def _web_login(url: str) -> tuple:
    opener = build_opener(HTTPCookieProcessor(CookieJar()))
    page = opener.open(f"{url}/accounts/login/", timeout=30).read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = {"username": "faulty", "password": PASSWORD, "csrfmiddlewaretoken": csrf}
    response = opener.open(f"{url}/accounts/login/", data=urlencode(form).encode(), timeout=30)
    assert response.geturl() == f"{url}/", "logged in"
    return opener


def _web_post(opener, url: str, chat_key: str, client_id: str, text: str):
    page = opener.open(f"{url}/chats/{chat_key}/", timeout=30).read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    token = csrf.group(1) if csrf else re.search(r'"X-CSRFToken": "([^"]+)"', page).group(1)
    form = {"text": text, "client_id": client_id, "csrfmiddlewaretoken": token}
    return opener.open(
        f"{url}/chats/{chat_key}/messages", data=urlencode(form).encode(), timeout=60
    )


def test_redis_down_while_messages_are_posted(stack, fake_llm, person):
    room, _ = chat_get_or_create(channel="web", chat_id="down-room", title="Down room")
    chat_member_ensure(chat=room, person=person, role=ChatMember.Role.OWNER)
    opener = _web_login(stack.url)

    stack.valkey.stop(crash=True)
    # The HTTP API: the message is stored and its turn queued; the enqueue fails quietly.
    status, body = stack.post("down-api", "down-api-1", "posted through the API, Redis down")
    assert status == 201, body
    assert body["turn"]["status"] == "queued"
    api_turn = body["turn"]["id"]
    # The dashboard: the message is stored and shown; the page answers normally.
    client_id = str(uuid.uuid4())
    text = "posted from the dashboard, Redis down"
    stack.posted.append(("down-room", client_id, text))
    response = _web_post(opener, stack.url, room.chat_key, client_id, text)
    assert response.status == 200 and text in response.read().decode()
    web_turn = Turn.objects.get(trigger=Message.objects.get(external_id=client_id)).pk
    assert Turn.objects.get(pk=web_turn).status == Turn.Status.QUEUED
    time.sleep(2)  # down a little longer: the processes keep trying
    assert stack.exits("worker") == [] and stack.exits("web") == []

    stack.valkey.start()
    back_at = time.monotonic()
    # The sweep (beat, every TURN_SWEEP_SECONDS) enqueues the turns whose task never made it.
    after_recovery = [wait_answered(t, timeout=60)[1] - back_at for t in (api_turn, web_turn)]

    counts = assert_kept_and_run_once(stack, fake_llm)
    stack.assert_all_running()
    assert stack.exits("worker") == [] and stack.exits("web") == []
    record_figures(
        "Redis down while posting (API and dashboard)",
        after_recovery,
        requeued_by_sweep=stack.requeued(),
        **counts,
    )
