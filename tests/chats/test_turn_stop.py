import pytest
from django.test import Client

from chats.agent.interrupts import clear_interrupt, interrupt_reason
from chats.agent.turns import Claim, turn_claim, turn_request
from chats.models import Turn
from chats.services import message_ingest

pytestmark = pytest.mark.django_db


def login(person):
    client = Client()
    client.force_login(person)
    return client


def stop_url(chat, turn):
    return f"/chats/{chat.chat_key}/turns/{turn.pk}/stop"


def test_a_member_stops_a_running_turn(team_chat, member):
    message = message_ingest(channel="web", chat_id="team-room", user_id="m", text="hi").message
    turn = turn_request(message=message, enqueue=False)
    assert turn_claim(turn_id=turn.pk, worker="w").outcome is Claim.CLAIMED
    try:
        assert login(member).post(stop_url(team_chat, turn)).status_code == 204
        assert interrupt_reason(turn.pk) == "stopped by marco"
    finally:
        clear_interrupt(turn.pk)


def test_a_queued_turn_is_stopped_before_it_starts(team_chat, owner):
    message = message_ingest(channel="web", chat_id="team-room", user_id="o", text="hi").message
    turn = turn_request(message=message, enqueue=False)
    assert login(owner).post(stop_url(team_chat, turn)).status_code == 204
    turn.refresh_from_db()
    assert turn.status == Turn.Status.INTERRUPTED
    assert turn_claim(turn_id=turn.pk, worker="w").outcome is Claim.GONE
    # Stopping a finished turn changes nothing.
    assert login(owner).post(stop_url(team_chat, turn)).status_code == 409


def test_outsiders_cannot_stop_and_get_404(team_chat, outsider):
    message = message_ingest(channel="web", chat_id="team-room", user_id="o", text="hi").message
    turn = turn_request(message=message, enqueue=False)
    assert login(outsider).post(stop_url(team_chat, turn)).status_code == 404
    assert login(outsider).get(stop_url(team_chat, turn)).status_code in (404, 405)
    turn.refresh_from_db()
    assert turn.status == Turn.Status.QUEUED
