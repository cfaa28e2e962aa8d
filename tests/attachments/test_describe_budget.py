"""The budget gate before a vision call: over a monthly cap that applies to the image's
message, the vision model is never called, the image says why it was not described, the
message's turn still runs, and the model is told it cannot see the image. Within the caps
the call is made and counted (kind "vision") against them."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.describe import NOT_DESCRIBED_BUDGET
from attachments.models import Attachment
from budgets.models import Budget, Scope
from budgets.selectors import budget_check
from budgets.services import budget_save
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, turn_claim
from chats.models import Message, Turn
from tests.attachments.conftest import png_bytes
from tests.fakes import openai_server as fake_openai
from usage.models import UsageRecord

# Transactional: a stored file is processed after its commit (files_processed_inline).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("files_processed_inline"),
]

PATH = "/api/v1/uploads/messages"


@pytest.fixture
def models(settings):
    """The hub's model takes no images; a vision model describes them."""
    with (
        fake_openai.FakeOpenAI(model="fake-model") as main,
        fake_openai.FakeOpenAI(model="fake-vision") as vision,
    ):
        main.configure(settings, LLM_VISION="off")
        settings.VISION_LLM_BASE_URL = vision.base_url
        settings.VISION_LLM_MODEL = "fake-vision"
        yield main, vision


@pytest.fixture
def staff(make_person):
    return make_person("ada", is_staff=True)


def upload(api, message_id="m1"):
    data = {
        "chat_id": "ops",
        "user_id": "bot",
        "message_id": message_id,
        "text": "what does this show?",
        "files": [SimpleUploadedFile("screen.png", png_bytes(300, 200))],
    }
    response = api.client.post(PATH, data=data, headers=api._headers(None))
    assert response.status_code == 201, response.content
    return Message.objects.get(external_id=message_id)


def run(turn):
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    return run_claimed_turn(claim.turn, provider=get_provider())


def test_over_a_cap_the_vision_model_is_not_called_and_the_turn_still_runs(
    models, api_for, owner, staff
):
    main, vision = models
    budget = budget_save(budget=Budget(scope=Scope.HUB, monthly_tokens=0), by=staff)
    message = upload(api_for(owner))

    assert vision.requests == []  # no call, no spend
    attachment = Attachment.objects.get()
    assert attachment.state == Attachment.State.FAILED
    assert attachment.failure.startswith(NOT_DESCRIBED_BUDGET)
    assert "monthly budget of 0 tokens, set by ada, is used up" in attachment.failure
    assert not UsageRecord.objects.filter(kind="vision").exists()
    # The file settled, so the held turn was requested: the message is answered.
    turn = Turn.objects.get(trigger=message)
    assert turn.status == Turn.Status.QUEUED

    # Staff raise the cap before the turn runs: it runs, and the model reads why it cannot
    # see the image, never a description.
    budget.delete()
    main.script(fake_openai.text("I cannot see the image: it was not described."))
    run(turn)
    turn.refresh_from_db()
    assert turn.status == Turn.Status.COMPLETED
    content = main.last_request["messages"][-1]["content"]
    text = "\n".join(part["text"] for part in content if part.get("type") == "text")
    assert "screen.png" in text and NOT_DESCRIBED_BUDGET in text
    assert "Tell the person you cannot see it" in text
    assert not [part for part in content if part.get("type") == "image_url"]


def test_the_turn_itself_answers_with_the_cap_when_it_is_still_spent(models, api_for, owner, staff):
    main, vision = models
    budget_save(budget=Budget(scope=Scope.HUB, monthly_tokens=0), by=staff)
    message = upload(api_for(owner))
    run(Turn.objects.get(trigger=message))
    turn = Turn.objects.get(trigger=message)
    assert turn.status == Turn.Status.COMPLETED
    assert "is used up" in Message.objects.get(pk=turn.reply_id).text
    assert vision.requests == [] and main.requests == []


def test_within_the_caps_the_image_is_described_and_the_call_counts(models, api_for, owner, staff):
    main, vision = models
    vision.script(fake_openai.text("A chart of disk use, 97 % full."))
    budget_save(budget=Budget(scope=Scope.HUB, monthly_tokens=1_000_000), by=staff)
    message = upload(api_for(owner))
    attachment = Attachment.objects.get()
    assert attachment.state == Attachment.State.READY
    assert attachment.description.startswith("A chart of disk use")
    assert len(vision.requests) == 1
    record = UsageRecord.objects.get(kind="vision")
    assert record.chat_id == message.chat_id and record.person_id == owner.pk
    # The vision call's tokens count against the caps like a turn's.
    assert budget_check(owner.pk, message.chat_id, now=record.at) is None
    spent = record.prompt_tokens + record.completion_tokens
    assert spent > 0
    budget_save(budget=Budget(scope=Scope.CHAT, chat=message.chat, monthly_tokens=spent), by=staff)
    refusal = budget_check(owner.pk, message.chat_id, now=record.at)
    assert refusal is not None and refusal.scope == Scope.CHAT

    # A second image in that chat is no longer described.
    upload(api_for(owner), message_id="m2")
    second = Attachment.objects.order_by("-id").first()
    assert second.state == Attachment.State.FAILED
    assert second.failure.startswith(NOT_DESCRIBED_BUDGET)
    assert len(vision.requests) == 1
