from datetime import timedelta

import pytest
from django.utils import timezone

from chats.agent.interrupts import clear_interrupt, interrupt_reason
from chats.agent.turns import (
    LEASE_EXPIRED,
    SUPERSEDED,
    WORKER_RESTARTED,
    Claim,
    turn_claim,
    turn_request,
    turns_recover_stale,
)
from chats.models import BusyMode, Turn
from chats.services import message_ingest

pytestmark = pytest.mark.django_db


def say(text, chat_id="room", **extra):
    return message_ingest(channel="api", chat_id=chat_id, user_id="u", text=text, **extra).message


def test_a_claimed_turn_runs_alone_in_its_chat():
    first = turn_request(message=say("one"), enqueue=False)
    assert first.status == Turn.Status.QUEUED
    claim = turn_claim(turn_id=first.pk, worker="w1")
    assert claim.outcome is Claim.CLAIMED
    first.refresh_from_db()
    assert first.status == Turn.Status.RUNNING and first.worker == "w1"
    assert first.lease_expires_at > timezone.now()
    # A turn in another chat is independent.
    other = turn_request(message=say("elsewhere", chat_id="other"), enqueue=False)
    assert turn_claim(turn_id=other.pk, worker="w1").outcome is Claim.CLAIMED
    # Claiming the same turn again does nothing.
    assert turn_claim(turn_id=first.pk, worker="w2").outcome is Claim.GONE


def test_interrupt_mode_stops_the_running_turn_and_supersedes_waiting_ones():
    running = turn_request(message=say("one"), enqueue=False)
    turn_claim(turn_id=running.pk, worker="w")
    waiting = turn_request(message=say("two"), enqueue=False)
    newest = turn_request(message=say("three"), enqueue=False)
    try:
        assert interrupt_reason(running.pk) == SUPERSEDED
        # While the first still runs, the newest must wait.
        assert turn_claim(turn_id=newest.pk, worker="w").outcome is Claim.BUSY
        # The middle one never runs: the newest message answers both.
        assert turn_claim(turn_id=waiting.pk, worker="w").outcome is Claim.GONE
        waiting.refresh_from_db()
        assert waiting.status == Turn.Status.INTERRUPTED and waiting.interrupt_reason == SUPERSEDED
    finally:
        clear_interrupt(running.pk)


def test_queue_mode_answers_in_order_without_interrupting():
    first_message = say("one")
    first_message.chat.busy_mode = BusyMode.QUEUE
    first_message.chat.save()
    first = turn_request(message=first_message, enqueue=False)
    turn_claim(turn_id=first.pk, worker="w")
    second = turn_request(message=say("two"), enqueue=False)
    third = turn_request(message=say("three"), enqueue=False)
    assert interrupt_reason(first.pk) is None
    assert turn_claim(turn_id=third.pk, worker="w").outcome is Claim.BUSY
    Turn.objects.filter(pk=first.pk).update(status=Turn.Status.COMPLETED)
    assert turn_claim(turn_id=third.pk, worker="w").outcome is Claim.BUSY  # second is older
    assert turn_claim(turn_id=second.pk, worker="w").outcome is Claim.CLAIMED


def test_a_turn_with_an_expired_lease_is_marked_interrupted_not_rerun():
    turn = turn_request(message=say("one"), enqueue=False)
    turn_claim(turn_id=turn.pk, worker="dead-worker")
    Turn.objects.filter(pk=turn.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    newer = turn_request(message=say("two"), enqueue=False)
    # Claiming in the same chat recovers the stale turn first.
    assert turn_claim(turn_id=newer.pk, worker="w").outcome is Claim.CLAIMED
    turn.refresh_from_db()
    assert turn.status == Turn.Status.INTERRUPTED and turn.interrupt_reason == LEASE_EXPIRED
    assert turn_claim(turn_id=turn.pk, worker="w").outcome is Claim.GONE


def test_a_restarted_worker_releases_its_turns_but_not_others():
    mine = turn_request(message=say("one", chat_id="a"), enqueue=False)
    theirs = turn_request(message=say("two", chat_id="b"), enqueue=False)
    turn_claim(turn_id=mine.pk, worker="celery@host1")
    turn_claim(turn_id=theirs.pk, worker="celery@host2")
    assert turns_recover_stale(worker="celery@host1") == 1
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.status == Turn.Status.INTERRUPTED and mine.interrupt_reason == WORKER_RESTARTED
    assert theirs.status == Turn.Status.RUNNING


@pytest.mark.storage
def test_stale_recovery_raises_the_interrupt_so_a_live_worker_stops():
    stale = turn_request(message=say("one", chat_id="a"), enqueue=False)
    restarted = turn_request(message=say("two", chat_id="b"), enqueue=False)
    turn_claim(turn_id=stale.pk, worker="slow-worker")
    turn_claim(turn_id=restarted.pk, worker="celery@host1")
    Turn.objects.filter(pk=stale.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    try:
        assert turns_recover_stale(worker="celery@host1") == 2
        # The worker of a stale turn may still be alive (stalled, partitioned): it must stop.
        assert interrupt_reason(stale.pk) == LEASE_EXPIRED
        assert interrupt_reason(restarted.pk) == WORKER_RESTARTED
    finally:
        clear_interrupt(stale.pk)
        clear_interrupt(restarted.pk)


@pytest.mark.storage
def test_a_turn_runs_once_however_often_its_task_is_delivered():
    turn = turn_request(message=say("one"), enqueue=False)
    outcomes = [turn_claim(turn_id=turn.pk, worker=f"w{n}").outcome for n in range(3)]
    assert outcomes == [Claim.CLAIMED, Claim.GONE, Claim.GONE]


def test_a_request_that_must_not_interrupt_leaves_the_running_and_waiting_turns_alone():
    running = turn_request(message=say("one"), enqueue=False)
    turn_claim(turn_id=running.pk, worker="w")
    polite = turn_request(message=say("scheduled"), enqueue=False, interrupt=False)
    assert interrupt_reason(running.pk) is None
    # It waits for the chat to be free, then runs.
    assert turn_claim(turn_id=polite.pk, worker="w").outcome is Claim.BUSY
    Turn.objects.filter(pk=running.pk).update(status=Turn.Status.WAITING)
    turn_request(message=say("scheduled again"), enqueue=False, interrupt=False)
    running.refresh_from_db()
    assert running.status == Turn.Status.WAITING


def test_turns_requested_quietly_stop_nothing_and_inherit_no_old_flag():
    from chats.agent import interrupts
    from chats.agent.interrupts import request_interrupt
    from chats.agent.turns import turns_request_quiet

    busy = message_ingest(channel="web", chat_id="quiet-a", user_id="u1", text="first")
    running = turn_request(message=busy.message, enqueue=False)
    Turn.objects.filter(pk=running.pk).update(status=Turn.Status.RUNNING)
    busy.chat.busy_mode = BusyMode.INTERRUPT
    busy.chat.save(update_fields=["busy_mode"])
    later = message_ingest(channel="web", chat_id="quiet-a", user_id="u1", text="second")
    other = message_ingest(channel="web", chat_id="quiet-b", user_id="u1", text="hello")
    # Flags left under the ids the new turns will get (ids come back on SQLite), in Redis.
    upcoming = [running.pk + 1, running.pk + 2]
    for turn_id in upcoming:
        request_interrupt(turn_id, "an old flag")
    interrupts._local_flags.clear()  # only the Redis copies: the other process's view
    turns = turns_request_quiet(messages=[later.message, other.message], enqueue=False)
    assert [t.trigger_id for t in turns] == [later.message.pk, other.message.pk]
    assert [t.pk for t in turns] == upcoming
    assert all(t.status == Turn.Status.QUEUED for t in turns)
    # Even in interrupt mode the running turn is not asked to stop.
    assert interrupt_reason(running.pk) is None
    assert Turn.objects.get(pk=running.pk).status == Turn.Status.RUNNING
    for turn_id in upcoming:
        assert interrupt_reason(turn_id) is None
