"""The periodic turn sweep: stale running turns are recovered (and told to stop), queued
turns whose Celery task is gone (the enqueue failed, Redis lost its data, the task ran out
of retries) are enqueued again, and a turn still runs exactly once."""

from datetime import timedelta

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from chats.agent.interrupts import clear_interrupt, interrupt_reason
from chats.agent.turns import (
    LEASE_EXPIRED,
    Claim,
    message_received,
    turn_claim,
    turn_request,
    turns_sweep,
)
from chats.models import BusyMode, Chat, Message, Turn
from chats.services import message_ingest
from chats.tasks import run_turn, sweep_turns
from hermes_site.celery import app
from hermes_site.redis import get_redis
from tests.fakes import openai_server as fake_openai

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.storage]


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


@pytest.fixture
def broker_down(monkeypatch):
    """Enqueueing fails the way kombu fails when Redis refuses connections."""

    def refuse(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(run_turn, "delay", refuse)
    return monkeypatch


def post(text, *, chat_id="room", channel="api", **extra):
    """A message as an adapter stores it: its turn is enqueued after commit."""
    result = message_ingest(channel=channel, chat_id=chat_id, user_id="u1", text=text, **extra)
    return message_received(result)


def run_now(turn_id: int) -> None:
    """The real task, run inline (a worker picking the enqueued task up)."""
    run_turn.apply(args=[turn_id])


def age(turn, seconds=120):
    Turn.objects.filter(pk=turn.pk).update(created_at=timezone.now() - timedelta(seconds=seconds))


def test_an_enqueue_failure_leaves_the_turn_queued_and_the_sweep_runs_it_once(
    fake, broker_down, settings
):
    settings.TURN_REQUEUE_AFTER_SECONDS = 0
    fake.script(fake_openai.text("Here you are."))
    turn = post("are you there?")
    turn.refresh_from_db()
    assert turn.status == Turn.Status.QUEUED  # kept, visible, not lost
    broker_down.undo()  # Redis is back

    assert turns_sweep(enqueue=run_now).requeued == 1
    turn.refresh_from_db()
    assert turn.status == Turn.Status.COMPLETED
    # Another sweep, a redelivered or duplicated task: the turn never runs twice.
    assert turns_sweep(enqueue=run_now).requeued == 0
    run_now(turn.pk)
    assert len(fake.requests) == 1
    assert list(Message.objects.filter(role="assistant").values_list("text", flat=True)) == [
        "Here you are."
    ]


def test_queue_mode_turns_behind_a_lost_one_proceed(fake, broker_down, settings):
    settings.TURN_REQUEUE_AFTER_SECONDS = 0
    fake.script(fake_openai.text("First answer."), fake_openai.text("Second answer."))
    first = post("one")  # its enqueue failed
    Chat.objects.filter(pk=first.chat_id).update(busy_mode=BusyMode.QUEUE)
    broker_down.undo()
    second = post("two")  # enqueued: its task waits for the first
    # The second waits behind the first, which nobody will run: the chat is blocked.
    assert turn_claim(turn_id=second.pk, worker="w").outcome is Claim.BUSY

    enqueued: list[int] = []
    assert turns_sweep(enqueue=enqueued.append).requeued == 2
    assert enqueued == [first.pk, second.pk]
    for turn_id in enqueued:
        run_now(turn_id)
    replies = Message.objects.filter(role="assistant").order_by("id")
    assert [m.text for m in replies] == ["First answer.", "Second answer."]


def test_a_lost_turn_is_requeued_once_per_grace_period_and_again_after_redis_lost_its_data(
    settings,
):
    settings.TURN_REQUEUE_AFTER_SECONDS = 30
    turn = turn_request(
        message=message_ingest(channel="api", chat_id="r", user_id="u", text="hi").message,
        enqueue=False,
    )
    enqueued: list[int] = []
    assert turns_sweep(enqueue=enqueued.append).requeued == 0  # younger than the grace period
    age(turn)
    assert turns_sweep(enqueue=enqueued.append).requeued == 1
    assert turns_sweep(enqueue=enqueued.append).requeued == 0  # its new task is on its way
    redis = get_redis()
    for key in redis.scan_iter(f"{settings.REDIS_KEY_PREFIX}:*"):
        redis.delete(key)  # Redis restarted empty: queues and markers are gone
    assert turns_sweep(enqueue=enqueued.append).requeued == 1
    assert enqueued == [turn.pk, turn.pk]


def test_the_sweep_recovers_stale_turns_of_every_channel_and_answers_what_waited(settings):
    settings.TURN_REQUEUE_AFTER_SECONDS = 0
    stale = []
    for channel, chat_id, extra in [("api", "ops", {}), ("telegram", "-5", {"chat_kind": "group"})]:
        message = message_ingest(channel=channel, chat_id=chat_id, user_id="1", text="a", **extra)
        turn = turn_request(message=message.message, enqueue=False)
        assert turn_claim(turn_id=turn.pk, worker="stalled").outcome is Claim.CLAIMED
        stale.append(turn)
    Turn.objects.filter(pk__in=[t.pk for t in stale]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    Chat.objects.filter(pk=stale[0].chat_id).update(busy_mode=BusyMode.QUEUE)
    waiting = turn_request(
        message=message_ingest(channel="api", chat_id="ops", user_id="1", text="b").message,
        enqueue=False,
    )
    enqueued: list[int] = []
    try:
        result = turns_sweep(enqueue=enqueued.append)
        assert result.recovered == 2 and enqueued == [waiting.pk]
        for turn in stale:
            turn.refresh_from_db()
            assert turn.status == Turn.Status.INTERRUPTED
            assert interrupt_reason(turn.pk) == LEASE_EXPIRED
    finally:
        for turn in stale:
            clear_interrupt(turn.pk)


def test_the_sweep_is_a_no_op_when_nothing_is_due(settings, django_assert_max_num_queries):
    settings.TURN_REQUEUE_AFTER_SECONDS = 30

    def turn_in(chat_id, text="x"):
        message = message_ingest(channel="api", chat_id=chat_id, user_id="u", text=text).message
        return turn_request(message=message, enqueue=False)

    running = turn_in("busy")
    turn_claim(turn_id=running.pk, worker="alive")
    age(turn_in("busy", "waits its turn"))  # old, but its chat is busy: its task polls
    turn_in("fresh")  # queued a moment ago: its task is on its way
    done = turn_in("done")
    Turn.objects.filter(pk=done.pk).update(status=Turn.Status.COMPLETED)
    age(done)
    enqueued: list[int] = []
    with django_assert_max_num_queries(2):
        result = turns_sweep(enqueue=enqueued.append)
    assert (result.recovered, result.requeued, enqueued) == (0, 0, [])
    running.refresh_from_db()
    assert running.status == Turn.Status.RUNNING


def test_beat_runs_the_sweep_at_the_configured_interval(settings):
    entry = app.conf.beat_schedule["sweep-turns"]
    assert entry["task"] == sweep_turns.name
    assert entry["schedule"] == settings.TURN_SWEEP_SECONDS
    # A backlog of sweeps (beat kept ticking while no worker ran) is dropped, not replayed.
    assert entry["options"]["expires"] <= settings.TURN_SWEEP_SECONDS


def test_two_tasks_claiming_one_turn_at_once_run_it_once():
    import threading

    from django.db import connections

    message = message_ingest(channel="api", chat_id="r", user_id="u", text="hi").message
    turn = turn_request(message=message, enqueue=False)
    start = threading.Barrier(2)
    outcomes = []

    def claim(worker):
        try:
            start.wait(timeout=10)
            outcomes.append(turn_claim(turn_id=turn.pk, worker=worker).outcome)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claim, args=(f"w{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(o.value for o in outcomes) == [Claim.CLAIMED.value, Claim.GONE.value]
