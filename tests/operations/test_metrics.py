"""/metrics: per-process counters that move when the hub works (a turn through the engine
with the fake model, a Telegram update, a chat socket), summed over the processes of the
host; whole-hub figures read from the database and Redis; and a bearer token to read any."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings as django_settings
from django.test import Client

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import message_received, turn_claim
from chats.models import Turn
from chats.services import message_ingest
from tests.bots.conftest import process
from tests.chats.test_consumers import TIMEOUT, session_headers, socket
from tests.fakes import openai_replies as reply
from tests.fakes.telegram_server import FakeTelegram, private_chat, tg_user
from tests.operations.helpers import TOKEN, scrape, value
from tests.turns import run

pytestmark = pytest.mark.django_db(transaction=True)
BASE_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.METRICS_TOKEN = TOKEN


def say(text: str, *, enqueue: bool = False) -> Turn:
    result = message_ingest(channel="api", chat_id="ops-room", user_id="u1", text=text)
    return message_received(result, enqueue=enqueue)


def test_a_turn_through_the_engine_moves_the_counters(fake_llm):
    client = Client()
    before = scrape(client)
    fake_llm.script(
        reply.tool_calls([("call-1", "no_such_tool", {})]),
        reply.text("Done, after one tool call."),
    )
    run(say("please use a tool"))
    fake_llm.script(reply.error(401))
    claim = turn_claim(turn_id=say("this one fails").pk, worker="test")
    failed = run_claimed_turn(claim.turn, provider=get_provider())
    assert failed.status == Turn.Status.FAILED
    after = scrape(client)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("hermes_turns_finished_total", status="completed") == 1
    assert moved("hermes_turns_finished_total", status="failed") == 1
    assert moved("hermes_turn_latency_seconds_count") == 2
    assert moved("hermes_turn_first_token_seconds_count") == 1  # the failed one streamed none
    assert moved("hermes_model_errors_total", kind="auth") == 1
    assert moved("hermes_tool_calls_total", outcome="error") == 1  # an unknown tool
    assert moved("hermes_tool_call_seconds_count") == 1
    # The whole hub's figures are the database's, whoever ran the turns.
    assert value(after, "hermes_hub_turns", status="completed") == 1
    assert value(after, "hermes_hub_turns", status="failed") == 1
    assert value(after, "hermes_hub_turns", status="running") == 0
    assert value(after, "hermes_hub_scrape_errors", source="database") == 0


def test_queue_depth_and_the_telegram_outbox_are_read_at_scrape_time(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_ALLOWED_USERS = ["1001"]
    client = Client()
    queue = django_settings.REDIS_KEY_PREFIX
    before = scrape(client)
    assert value(before, "hermes_hub_celery_queue_length", queue=queue) == 0
    say("waits for a worker", enqueue=True)  # no worker runs in this test
    alice = tg_user(1001, "Alice")
    process(FakeTelegram().message(private_chat(alice), alice, "/help"))
    after = scrape(client)
    assert value(after, "hermes_hub_turns", status="queued") >= 1
    assert value(after, "hermes_hub_celery_queue_length", queue=queue) >= 1
    assert value(after, "hermes_hub_telegram_outbox", status="pending") >= 1
    moved = value(after, "hermes_telegram_updates_total", kind="message", duplicate="no") - value(
        before, "hermes_telegram_updates_total", kind="message", duplicate="no"
    )
    assert moved == 1
    assert value(after, "hermes_hub_approvals_waiting") == 0
    assert value(after, "hermes_hub_scrape_errors", source="redis") == 0


def test_open_chat_sockets_are_counted_while_open(member, team_chat):
    headers = session_headers(member)

    def open_sockets() -> float:
        return value(scrape(Client()), "hermes_websocket_connections")

    async def body():
        base = await sync_to_async(open_sockets)()
        communicator = socket(team_chat.chat_key, headers)
        connected, _ = await communicator.connect(timeout=TIMEOUT)
        assert connected
        assert await sync_to_async(open_sockets)() == base + 1
        await communicator.disconnect()
        assert await sync_to_async(open_sockets)() == base

    async_to_sync(body)()


def test_counters_of_every_process_on_the_host_are_summed():
    """Another process (a Celery worker, the bridge) counts into the same directory; its
    counters stay after it exits, its open-socket gauge does not."""
    client = Client()
    before = scrape(client)
    code = (
        "import django; django.setup()\n"
        "from operations import metrics\n"
        "metrics.TURNS_FINISHED.labels(status='interrupted').inc(3)\n"
        "metrics.WEBSOCKETS_OPEN.inc(5)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hermes_site.settings"}
    subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=env, check=True, timeout=120)
    after = scrape(client)
    interrupted = ("hermes_turns_finished_total", {"status": "interrupted"})
    assert (
        value(after, interrupted[0], **interrupted[1])
        == value(before, interrupted[0], **interrupted[1]) + 3
    )
    assert value(after, "hermes_websocket_connections") == value(
        before, "hermes_websocket_connections"
    )


def test_nobody_reads_the_metrics_without_the_token(settings, owner, api_for, make_person):
    staff = make_person("stella", is_staff=True, is_superuser=True)
    assert Client().get("/metrics").status_code == 401
    wrong = Client().get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    basic = Client().get("/metrics", headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status_code == 401
    # An integration's API token and a staff session are not the scrape token.
    assert api_for(owner).get("/metrics").status_code == 401
    logged_in = Client()
    logged_in.force_login(staff)
    assert logged_in.get("/metrics").status_code == 401
    assert scrape(Client())  # the token itself works


def test_metrics_are_off_without_a_token(settings):
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 404
    refused = Client().get("/metrics", headers={"Authorization": "Bearer "})
    assert refused.status_code == 404


def test_a_scrape_with_redis_down_still_answers_and_says_so(settings):
    """The whole-hub figures that Redis holds fail alone: the scrape answers 200 with the
    database's figures and flags the source, so Prometheus keeps the rest of the series."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nobody listens on port 1
    samples = scrape(Client())
    assert value(samples, "hermes_hub_scrape_errors", source="redis") == 1
    assert value(samples, "hermes_hub_scrape_errors", source="database") == 0
    assert ("hermes_hub_turns", (("status", "queued"),)) in samples
    assert not any(name == "hermes_hub_celery_queue_length" for name, _ in samples)
