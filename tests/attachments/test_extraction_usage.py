"""A document's reading is counted in usage as kind "extraction": the pages read (as
`calls`) and the time, attributed like its message, never priced, so no budget is spent and
no price is reported missing; a file that could not be read records nothing."""

from datetime import timedelta

import pytest

from attachments.models import Attachment
from attachments.services import attachment_process, attachment_store
from budgets.models import Budget, Scope
from budgets.selectors import budget_check
from budgets.services import budget_save
from chats.models import Message
from tests.attachments.documents import encrypted_pdf, text_pdf
from usage.models import Kind, ModelPrice, UsageDay, UsageRecord
from usage.selectors import spend

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def enqueued(monkeypatch):
    """The files' queue is the test itself: it calls attachment_process."""
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda name, args: None)


def api_message(api) -> Message:
    response = api.post(
        "/api/v1/messages", {"chat_id": "ops", "user_id": "bot", "message_id": "m1", "text": "x"}
    )
    assert response.status_code == 201, response.content
    return Message.objects.get(pk=response.json()["message"]["id"])


def extract(message, name, data) -> Attachment:
    stored = attachment_store(message=message, name=name, data=data)
    return attachment_process(stored.pk)


def test_the_pages_read_are_recorded_for_the_messages_author(api_for, owner, make_person):
    message = api_message(api_for(owner))
    attachment = extract(message, "manual.pdf", text_pdf(3))
    assert attachment.state == Attachment.State.READY and attachment.page_count == 3
    record = UsageRecord.objects.get(kind=Kind.EXTRACTION)
    # Attributed like the message: an integration's message to its token's owner.
    assert (record.calls, record.chat_id, record.person_id) == (3, message.chat_id, owner.pk)
    assert record.model == "" and record.prompt_tokens == record.completion_tokens == 0
    assert record.cost_nanos is None and record.duration_ms is not None
    day = UsageDay.objects.get(kind=Kind.EXTRACTION)
    assert (day.calls, day.unpriced_calls, day.unpriced_tokens) == (3, 0, 0)
    # Even with a price for the empty model name and a zero tokens cap, nothing is spent.
    ModelPrice.objects.create(model="", input_per_million=1, output_per_million=1)
    extract(message, "more.txt", b"one page of text\n")
    assert UsageRecord.objects.filter(kind=Kind.EXTRACTION).count() == 2
    assert not UsageRecord.objects.filter(kind=Kind.EXTRACTION, cost_nanos__isnull=False).exists()
    staff = make_person("ada", is_staff=True)
    budget_save(budget=Budget(scope=Scope.HUB, monthly_tokens=1), by=staff)
    assert budget_check(owner.pk, message.chat_id, now=record.at) is None


def test_a_file_that_could_not_be_read_records_nothing(say):
    attachment = extract(say("locked"), "locked.pdf", encrypted_pdf())
    assert attachment.state == Attachment.State.FAILED
    assert not UsageRecord.objects.filter(kind=Kind.EXTRACTION).exists()


def test_the_spend_counts_pages_and_no_tokens_nor_missing_prices(api_for, owner):
    message = api_message(api_for(owner))
    extract(message, "manual.pdf", text_pdf(2))
    record = UsageRecord.objects.get(kind=Kind.EXTRACTION)
    for who in ({}, {"person_id": owner.pk}, {"chat_id": message.chat_id}):
        total = spend(start=record.day, end=record.day + timedelta(days=1), **who)
        assert (total.calls, total.prompt_tokens, total.completion_tokens) == (2, 0, 0)
        assert (total.unpriced_calls, total.unpriced_tokens) == (0, 0)
