"""The optional quiet notice after a review that proposed something: one people-only message
in the chat, which the model never sees."""

import pytest

from chats.models import Chat, Message
from learning.models import Review
from learning.services import chat_learning_update
from learning.tasks import run_review
from tests.fakes import openai_server as fake_openai
from tests.learning.helpers import calls, chat_turn

pytestmark = pytest.mark.django_db(transaction=True)

FACT = {"action": "add", "scope": "team", "content": "Staging runs on the blue cluster."}


def test_with_the_notice_on_a_review_that_proposed_adds_one_notice_the_model_never_sees(
    fake, queued, settings
):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    chat_turn(fake, "staging is on the blue cluster now")
    chat = Chat.objects.get()
    chat_learning_update(chat=chat, memory_interval=None, skill_interval=None, review_notice=True)
    fake.script(calls("memory", FACT), fake_openai.text("Proposed a team fact."))
    run_review(queued[-1])
    notice = Message.objects.get(role=Message.Role.SYSTEM)
    assert notice.text == "Saved for review: 1 memory fact (the team)."
    assert notice.metadata == {"notice": "learning", "review": queued[-1]}

    chat_turn(fake, "what did I say?")
    sent = " ".join(str(m.get("content")) for m in fake.requests[-1]["messages"])
    assert "staging is on the blue cluster now" in sent  # the history is there
    assert "Saved for review" not in sent  # the notice is not


def test_no_notice_when_it_is_off_or_nothing_was_proposed(fake, queued, settings):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    chat_turn(fake, "hello")
    fake.script(calls("memory", FACT), fake_openai.text("Proposed a team fact."))
    run_review(queued[-1])  # notice off (the default)
    chat = Chat.objects.get()
    chat_learning_update(chat=chat, memory_interval=None, skill_interval=None, review_notice=True)
    chat_turn(fake, "hello again")
    fake.script(fake_openai.text("Nothing to save."))
    run_review(queued[-1])  # on, but nothing proposed
    assert Review.objects.filter(status=Review.Status.DONE).count() == 2
    assert not Message.objects.filter(role=Message.Role.SYSTEM).exists()
