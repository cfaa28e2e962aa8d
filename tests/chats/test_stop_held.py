"""A person's Stop stops a held turn (a message waiting for its files, chats/agent/holds.py):
the message stays, no turn runs for it, not when its files settle, nor at its deadline, nor
by the sweep. On the dashboard (`POST /chats/<key>/stop`), the HTTP API
(`POST /api/v1/chats/<key>/stop`) and the terminal's `/stop`; outsiders are refused."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from chats.agent.holds import (
    chat_stop,
    turn_hold_clear,
    turn_hold_place,
    turn_hold_poll,
    turn_holds_release_due,
)
from chats.agent.turns import turn_request
from chats.models import Chat, Message, Turn, TurnHold
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.fakes import openai_server as fake_openai
from tests.live import BASE_DIR, database_url_for_subprocesses


def _held(chat_id: str = "team-room", channel: str = "web", text: str = "read my file"):
    """A message of the chat whose turn is held for its files, as attachments places it."""
    message = message_ingest(channel=channel, chat_id=chat_id, user_id="o", text=text).message
    turn_hold_place(message=message, deadline_seconds=30, reason="files", respond=True)
    return message


def _no_turn_ever(message):
    """Whatever would have released it finds it released without a turn."""
    assert turn_hold_clear(message_id=message.pk, reason="files") is None  # the files settle
    TurnHold.objects.filter(message=message).update(deadline=timezone.now() - timedelta(1))
    assert turn_holds_release_due() == 0  # the sweep, past the deadline
    state = turn_hold_poll(message.pk)  # a following channel
    assert not state.held and state.turn_id is None
    assert not Turn.objects.filter(trigger=message).exists()
    assert Message.objects.filter(pk=message.pk, text=message.text).exists()  # it stays


def login(person):
    client = Client()
    client.force_login(person)
    return client


@pytest.mark.django_db
def test_the_dashboards_stop_stops_a_held_turn(team_chat, member):
    message = _held()
    response = login(member).post(f"/chats/{team_chat.chat_key}/stop")
    assert response.status_code == 204
    hold = TurnHold.objects.get(message=message)
    assert hold.state == TurnHold.State.RELEASED and hold.turn_id is None
    _no_turn_ever(message)
    # Nothing left to stop.
    assert login(member).post(f"/chats/{team_chat.chat_key}/stop").status_code == 409


@pytest.mark.django_db
def test_the_dashboards_stop_stops_queued_turns_too_and_only_in_its_chat(team_chat, owner):
    other, _ = chat_get_or_create(channel="web", chat_id="other-room", title="Other")
    chat_member_ensure(chat=other, person=owner)
    elsewhere = _held(chat_id="other-room")
    queued = turn_request(
        message=message_ingest(channel="web", chat_id="team-room", user_id="o", text="hi").message,
        enqueue=False,
    )
    assert login(owner).post(f"/chats/{team_chat.chat_key}/stop").status_code == 204
    queued.refresh_from_db()
    assert queued.status == Turn.Status.INTERRUPTED
    assert TurnHold.objects.get(message=elsewhere).state == TurnHold.State.HELD


@pytest.mark.django_db
def test_outsiders_and_members_of_other_rooms_cannot_stop(team_chat, outsider):
    other, _ = chat_get_or_create(channel="web", chat_id="oscars-room", title="Oscar's")
    chat_member_ensure(chat=other, person=outsider)
    message = _held()
    client = login(outsider)
    assert client.post(f"/chats/{team_chat.chat_key}/stop").status_code == 404
    assert client.get(f"/chats/{team_chat.chat_key}/stop").status_code in (404, 405)
    assert Client().post(f"/chats/{team_chat.chat_key}/stop").status_code == 302  # sign in
    assert TurnHold.objects.get(message=message).state == TurnHold.State.HELD


@pytest.mark.django_db
def test_the_http_api_stops_a_held_turn_for_readers_only(team_chat, member, outsider, api_for):
    message = _held()
    url = f"/api/v1/chats/{team_chat.chat_key}/stop"
    refused = api_for(outsider).post(url, {})
    assert refused.status_code == 404, refused.content
    assert TurnHold.objects.get(message=message).state == TurnHold.State.HELD
    assert api_for(member).get(url).status_code == 405
    answer = api_for(member).post(url, {})
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"stopped": 1}
    _no_turn_ever(message)
    assert api_for(member).post(url, {}).json() == {"stopped": 0}


@pytest.mark.django_db
def test_chat_stop_counts_held_messages_once_per_message(team_chat):
    first, second = _held(text="one"), _held(text="two")
    assert chat_stop(chat=team_chat, reason="stopped by a test") == 2
    for message in (first, second):
        _no_turn_ever(message)


@pytest.mark.django_db(transaction=True)
def test_the_terminals_stop_stops_a_held_turn(fake_llm):
    fake_llm.default = fake_openai.echo("you said: ")
    chat, _ = chat_get_or_create(channel="cli", chat_id="held", kind="cli", title="held")
    message = _held(chat_id="held", channel="cli")
    assert message.chat_id == chat.pk
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocesses(),
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": fake_llm.base_url,
        "LLM_MODEL": "fake-model",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "chat", "--profile", "held"],
        input="/stop\n/stop\n/quit\n",
        capture_output=True,
        text=True,
        cwd=BASE_DIR,
        env=env,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("Stopped.") == 1, result.stdout
    assert "Nothing is running." in result.stdout
    assert Chat.objects.filter(chat_key="cli:held").count() == 1
    _no_turn_ever(message)
