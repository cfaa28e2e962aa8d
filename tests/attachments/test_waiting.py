"""The turn waits for its files: a message with a pending file gets its turn once the file
settles, or after ATTACHMENTS_TURN_WAIT_SECONDS with what is ready; once, whichever comes
first; through the usual turn path (a running turn is interrupted then, not before)."""

import threading
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import close_old_connections, connection
from django.utils import timezone

from attachments.models import Attachment
from attachments.processing import Derived, processor_register, processor_unregister
from attachments.services import attachment_process, attachment_store
from attachments.waiting import files_hold_if_pending, turn_request_when_ready
from chats.agent.holds import (
    HoldState,
    turn_hold_poll,
    turn_hold_wait,
    turn_holds_release,
    turn_holds_release_due,
)
from chats.agent.interrupts import interrupt_reason
from chats.models import Turn, TurnHold

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slow_text(monkeypatch):
    """A processor of `.txt` files: they stay `pending` until a test processes them."""
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda *a, **k: None)
    processor_register(
        "test-slow", wants=lambda a: a.name.endswith(".txt"), run=lambda a: Derived("words")
    )
    yield
    processor_unregister("test-slow")


def _past_deadline(message):
    TurnHold.objects.filter(message=message).update(
        deadline=timezone.now() - timedelta(seconds=1),
        not_before=timezone.now() - timedelta(seconds=1),
    )


def test_a_message_whose_files_are_ready_gets_its_turn_at_once(say, png):
    message = say()
    attachment_store(message=message, name="a.png", data=png)
    turn = turn_request_when_ready(message=message)
    assert turn is not None and turn.trigger_id == message.pk
    assert not TurnHold.objects.exists()


def test_the_turn_waits_for_a_pending_file_and_goes_when_it_settles(say, slow_text):
    message = say()
    pending = attachment_store(message=message, name="notes.txt", data=b"the words\n")
    assert pending.state == Attachment.State.PENDING
    assert turn_request_when_ready(message=message) is None
    assert not Turn.objects.exists()
    assert TurnHold.objects.get(message=message).reasons == ["files"]

    attachment_process(pending.pk)  # settles: attachment_settled lets the turn go

    turn = Turn.objects.get()
    assert turn.trigger_id == message.pk and turn.status == Turn.Status.QUEUED
    hold = TurnHold.objects.get(message=message)
    assert hold.state == TurnHold.State.RELEASED and hold.turn_id == turn.pk


def test_the_turn_waits_for_every_file_of_the_message(say, slow_text):
    message = say()
    first = attachment_store(message=message, name="one.txt", data=b"one\n")
    second = attachment_store(message=message, name="two.txt", data=b"two\n")
    turn_request_when_ready(message=message)
    attachment_process(first.pk)
    assert not Turn.objects.exists()  # the second one is still being read
    attachment_process(second.pk)
    assert Turn.objects.filter(trigger=message).count() == 1


def test_after_the_bounded_wait_the_turn_goes_with_what_is_ready(say, slow_text, settings):
    message = say()
    pending = attachment_store(message=message, name="notes.txt", data=b"slow\n")
    turn_request_when_ready(message=message)
    hold = TurnHold.objects.get(message=message)
    assert hold.deadline - hold.created_at == timedelta(
        seconds=settings.ATTACHMENTS_TURN_WAIT_SECONDS
    )
    assert turn_holds_release(hold_id=hold.pk) is None  # the timer came early: nothing yet
    _past_deadline(message)
    turn = turn_holds_release(hold_id=hold.pk)  # the deadline's timer
    assert turn is not None and turn.trigger_id == message.pk
    assert Attachment.objects.get(pk=pending.pk).state == Attachment.State.PENDING
    # The file settling later requests nothing more.
    attachment_process(pending.pk)
    assert Turn.objects.filter(trigger=message).count() == 1


def test_the_sweep_releases_a_hold_whose_timer_was_lost(say, slow_text):
    message = say()
    attachment_store(message=message, name="notes.txt", data=b"slow\n")
    turn_request_when_ready(message=message)
    assert turn_holds_release_due() == 0
    _past_deadline(message)
    assert turn_holds_release_due() == 1
    assert turn_holds_release_due() == 0
    assert Turn.objects.filter(trigger=message).count() == 1


def test_settle_and_timeout_racing_request_one_turn(say, slow_text):
    """The file settles in one thread while the deadline's timer fires in another."""
    message = say()
    pending = attachment_store(message=message, name="notes.txt", data=b"race\n")
    turn_request_when_ready(message=message)
    _past_deadline(message)
    hold_id = TurnHold.objects.get(message=message).pk
    start = threading.Barrier(2)
    errors = []

    def run(work):
        try:
            start.wait(timeout=10)
            work()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [
        threading.Thread(target=run, args=(lambda: attachment_process(pending.pk),)),
        threading.Thread(target=run, args=(lambda: turn_holds_release(hold_id=hold_id),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    assert Turn.objects.filter(trigger=message).count() == 1
    # And the calls that come after both (a redelivered task, the sweep) add nothing.
    assert turn_holds_release(hold_id=hold_id) is None and turn_holds_release_due() == 0
    assert Turn.objects.filter(trigger=message).count() == 1


def test_the_busy_rule_applies_when_the_turn_is_requested(say, slow_text):
    """Interrupt mode: a running turn is stopped by the held message's turn once its files
    are read (as by any new message), not while they are being read."""
    earlier = say("a long question")
    running = Turn.objects.create(chat=earlier.chat, trigger=earlier, status=Turn.Status.RUNNING)
    message = say("and this file")
    pending = attachment_store(message=message, name="notes.txt", data=b"words\n")
    turn_request_when_ready(message=message)
    assert interrupt_reason(running.pk) is None
    attachment_process(pending.pk)
    assert interrupt_reason(running.pk) is not None
    assert Turn.objects.filter(trigger=message, status=Turn.Status.QUEUED).count() == 1


def test_the_upload_api_answers_at_once_and_the_turn_follows_the_files(api_for, owner, slow_text):
    api = api_for(owner)
    data = {"chat_id": "ops", "user_id": "bot", "message_id": "m1", "text": "read this"}
    data["files"] = [SimpleUploadedFile("notes.txt", b"the runbook\n")]
    response = api.client.post("/api/v1/uploads/messages", data=data, headers=api._headers(None))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["turn"] is None and body["turn_waits_for_files"] is True
    assert body["attachments"][0]["state"] == "pending"
    attachment_process(body["attachments"][0]["id"])
    turn = Turn.objects.get()
    assert turn.trigger_id == body["message"]["id"]


def test_a_following_channel_polls_the_hold_and_releases_it_at_its_deadline(say, slow_text):
    """`/v1` and the terminal follow a held message with `turn_hold_poll`: held while the file
    is read, released (by the poll itself) once past the deadline, with the turn it requested;
    a hold placed for the terminal (`respond=False`) releases without requesting one."""
    message = say()
    attachment_store(message=message, name="notes.txt", data=b"slow\n")
    assert files_hold_if_pending(message=message, respond=True)
    state = turn_hold_poll(message.pk)
    assert state.held and state.reasons == ("files",) and state.deadline is not None
    assert not Turn.objects.exists()
    _past_deadline(message)
    state = turn_hold_poll(message.pk)  # no timer ran: the poll released it
    assert not state.held and state.turn_id == Turn.objects.get(trigger=message).pk
    assert turn_hold_poll(message.pk) == state  # once

    terminal = say("from the terminal")
    attachment_store(message=terminal, name="more.txt", data=b"slow\n")
    assert files_hold_if_pending(message=terminal, respond=False)
    _past_deadline(terminal)
    assert turn_hold_wait(terminal.pk, poll_seconds=0) == HoldState(held=False, turn_id=None)
    assert not Turn.objects.filter(trigger=terminal).exists()  # the terminal requests its own

    ready = say("nothing pending")
    assert not files_hold_if_pending(message=ready, respond=True)
    assert turn_hold_poll(ready.pk) == HoldState(held=False)
