"""The processing registry: a file some processor wants is `pending` until the files' task
settles it, `ready` with what was derived or `failed` with a reason, and `attachment_settled`
is sent once; a file nobody wants is `ready` at once."""

import pytest

from attachments.models import Attachment
from attachments.processing import (
    PROCESS_TASK,
    Derived,
    ProcessingFailed,
    processor_register,
    processor_unregister,
)
from attachments.services import attachment_process, attachment_store
from attachments.signals import attachment_settled
from attachments.tasks import files_queue, route_files

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def settled():
    seen = []

    def receive(sender, attachment, **kwargs):
        seen.append((attachment.pk, attachment.state))

    attachment_settled.connect(receive)
    yield seen
    attachment_settled.disconnect(receive)


@pytest.fixture
def processor(monkeypatch):
    """A processor of `.txt` files whose behaviour each test sets."""
    behaviour = {}
    enqueued = []
    # The registry alone: the apps' own processors (documents' text …) are set aside.
    monkeypatch.setattr("attachments.processing._processors", {})
    monkeypatch.setattr(
        "attachments.services.current_app.send_task",
        lambda name, args: enqueued.append((name, *args)),
    )

    def run(attachment):
        outcome = behaviour["outcome"]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    processor_register("test-text", wants=lambda a: a.name.endswith(".txt"), run=run)
    yield behaviour, enqueued
    processor_unregister("test-text")


def test_a_wanted_file_is_pending_then_ready_with_what_was_derived(say, processor, settled):
    behaviour, enqueued = processor
    behaviour["outcome"] = Derived(extracted_text="the words", page_count=1)
    attachment = attachment_store(message=say(), name="notes.txt", data=b"the words\n")
    assert attachment.state == Attachment.State.PENDING
    assert enqueued == [(PROCESS_TASK, attachment.pk)]  # sent after the commit
    done = attachment_process(attachment.pk)
    assert (done.state, done.extracted_text, done.page_count) == ("ready", "the words", 1)
    assert settled == [(attachment.pk, "ready")]
    assert attachment_process(attachment.pk) is None  # settled once, never twice
    assert settled == [(attachment.pk, "ready")]


def test_an_unreadable_file_fails_with_the_processors_reason(say, processor, settled):
    behaviour, _ = processor
    behaviour["outcome"] = ProcessingFailed("The PDF is encrypted.")
    attachment = attachment_store(message=say(), name="secret.txt", data=b"x")
    done = attachment_process(attachment.pk)
    assert (done.state, done.failure) == ("failed", "The PDF is encrypted.")
    assert settled == [(attachment.pk, "failed")]


def test_a_crashing_processor_fails_the_file_and_not_the_worker(say, processor, settled):
    behaviour, _ = processor
    behaviour["outcome"] = MemoryError("boom")
    attachment = attachment_store(message=say(), name="bomb.txt", data=b"x")
    done = attachment_process(attachment.pk)
    assert (done.state, done.failure) == ("failed", "The hub could not read this file.")


def test_a_file_no_processor_wants_is_ready_at_once(say, processor, png):
    _, enqueued = processor
    attachment = attachment_store(message=say(), name="photo.png", data=png)
    assert attachment.state == Attachment.State.READY
    assert enqueued == []


def test_processing_goes_to_the_files_queue(settings):
    settings.REDIS_KEY_PREFIX = "hubx"
    assert (
        route_files(PROCESS_TASK, (), {}, {}) == {"queue": "hubx-files"} == {"queue": files_queue()}
    )
    assert route_files("chats.tasks.run_turn", (), {}, {}) is None
