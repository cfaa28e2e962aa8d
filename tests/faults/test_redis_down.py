"""Fault injection (tests/faults/conftest.py says what every scenario checks): Redis down
while messages are posted through the API and the dashboard."""

import re
import time
import uuid
from http.cookiejar import CookieJar
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, build_opener

import pytest

from chats.models import ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure
from tests.faults.stack import PASSWORD, assert_kept_and_run_once, record_figures, wait_answered

pytestmark = [pytest.mark.timeout(900), pytest.mark.heavy]


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
