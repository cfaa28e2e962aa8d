"""`make run`'s shape for real: daphne and a Celery worker (prefork: turns run in a child
process) share one metrics directory, so a scrape of the web process reports the turn the
worker ran; the worker's heartbeat makes readiness and its clean stop takes it back."""

import json
import os
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from chats.models import Turn
from tests.agent.test_end_to_end import post, room, wait_for_turn  # noqa: F401 - a fixture
from tests.fakes import openai_server as fake_openai
from tests.operations.helpers import TOKEN

pytestmark = [pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]


def scrape(stack) -> dict[tuple, float]:
    request = urllib.request.Request(
        f"{stack.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def readiness(stack) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{stack.url}/readyz", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout} s")


@pytest.fixture
def stack(transactional_db, fake_llm, settings):
    from django.conf import global_settings

    from tests.live import LiveStack

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    live = LiveStack(
        llm_base_url=fake_llm.base_url,
        worker_name=f"ops-{os.getpid()}@%h",
        extra_env={"METRICS_TOKEN": TOKEN, "WORKER_HEARTBEAT_SECONDS": "1"},
    )
    try:
        live.start_web()
        live.start_worker(pool="prefork", concurrency=1)
        yield live
    finally:
        live.stop()


def test_the_web_process_reports_the_turn_a_worker_ran_and_the_worker_heartbeat(
    stack,
    fake_llm,
    room,  # noqa: F811 - the fixture imported above
):
    chat, token = room
    completed = ("hermes_turns_finished_total", (("status", "completed"),))
    before = scrape(stack).get(completed, 0.0)
    fake_llm.script(fake_openai.text("Hello from the worker."))
    status, body = post(
        stack,
        token,
        {
            "chat_id": "ops",
            "user_id": "u1",
            "user_name": "Alice",
            "message_id": "m-1",
            "text": "hi",
        },
    )
    assert status == 201, body
    turn_id = Turn.objects.get(chat=chat).pk
    assert wait_for_turn(turn_id, {Turn.Status.COMPLETED}).status == Turn.Status.COMPLETED
    # Counted in the worker's child process, read through daphne's /metrics.
    wait_for(lambda: scrape(stack).get(completed, 0.0) == before + 1, "the count")

    # The worker beats: readiness waits only for the scheduler (no beat runs here).
    def worker_beating():
        code, body = readiness(stack)
        return (code, body) if body["checks"]["workers"] == "1 alive" else None

    code, body = wait_for(worker_beating, "the worker heartbeat")
    assert code == 503 and body["failing"] == ["scheduler"]
    # A worker stopped cleanly takes its heartbeat back: readiness names the workers.
    stack.stop()
    stack.start_web()
    code, body = readiness(stack)
    assert code == 503 and "workers" in body["failing"] and body["checks"]["redis"] == "ok"
