"""The turn runner port (`chats.agent.runner`): the lifecycle hands every queued turn to the
runner an app installed (Celery's, by `chats.apps`), after the commit, and knows no other."""

import pytest

from chats.agent.runner import NoRunner, turn_runner, turn_runner_install
from chats.agent.turns import message_received, turns_request_quiet
from chats.celery_runner import CeleryTurnRunner
from chats.models import Message, Turn
from chats.services import message_ingest

pytestmark = [pytest.mark.django_db(transaction=True)]


class Recorder:
    def __init__(self):
        self.handed: list[int] = []

    def enqueue(self, turn_id: int) -> None:
        self.handed.append(turn_id)

    def enqueue_many(self, turn_ids) -> None:
        self.handed.extend(turn_ids)


@pytest.fixture
def runner():
    recorder = Recorder()
    previous = turn_runner_install(recorder)
    yield recorder
    turn_runner_install(previous)


def post(text: str, *, chat_id: str = "room"):
    return message_ingest(channel="api", chat_id=chat_id, user_id="u1", text=text)


def test_the_app_installs_the_celery_runner():
    assert isinstance(turn_runner(), CeleryTurnRunner)


def test_a_requested_turn_is_handed_to_the_installed_runner(runner):
    turn = message_received(post("hello"))
    assert runner.handed == [turn.pk]


def test_a_batch_of_quiet_turns_is_handed_over_at_once(runner):
    messages = [post("tick", chat_id=f"room-{n}").message for n in range(3)]
    turns = turns_request_quiet(messages=messages)
    assert runner.handed == [turn.pk for turn in turns]


def test_a_turn_run_in_process_is_handed_to_nobody(runner):
    turn = message_received(post("from the terminal"), enqueue=False)
    assert turn.status == Turn.Status.QUEUED
    assert runner.handed == []


def test_without_a_runner_the_turn_stays_queued_and_the_failure_is_logged(caplog):
    previous = turn_runner_install(NoRunner())
    try:
        turn = message_received(post("anyone?"))
    finally:
        turn_runner_install(previous)
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.QUEUED
    assert Message.objects.filter(pk=turn.trigger_id).exists()
    assert "could not enqueue turn" in caplog.text
