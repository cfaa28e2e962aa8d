"""Budgets before reviews: a background review whose spend counts against a used-up cap is
skipped before any model call, with the reason recorded, never retried; the turns it would
have read are read by the next review that runs. Under the cap it runs as usual."""

import pytest
from django.utils import timezone

from budgets.models import Budget, Scope
from budgets.selectors import month_bounds
from budgets.services import budget_save
from learning.gates import register_review_gate, unregister_review_gate
from learning.models import Review
from learning.tasks import run_review
from tests.fakes import openai_server as fake_openai
from tests.learning.helpers import chat_turn
from usage.models import Kind, UsageRecord
from usage.services import usage_record

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def every_turn(settings):
    """A memory review after every user turn."""
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0


@pytest.fixture
def ada(make_person):
    return make_person("ada", is_staff=True)


def resets_on() -> str:
    _, end = month_bounds(timezone.now())
    return f"{end.day} {end:%B %Y}"


def use_up(person, tokens):
    """Spend recorded elsewhere this month (another chat's turns)."""
    usage_record(kind=Kind.TURN, chat_id=None, person_id=person.pk, model="m", prompt_tokens=tokens)


def test_a_review_over_the_persons_cap_is_skipped_without_a_model_call(
    fake, queued, every_turn, ada, owner
):
    budget = budget_save(
        budget=Budget(scope=Scope.PERSON, person=owner, monthly_tokens=100_000), by=ada
    )
    chat_turn(fake, "I prefer tea over coffee", person=owner)
    use_up(owner, 100_000)  # the cap is used up after the turn, before its review runs
    calls_before = len(fake.requests)
    fake.script(fake_openai.text("Nothing to save."))

    run_review(queued[-1])

    review = Review.objects.get(pk=queued[-1])
    assert review.status == Review.Status.SKIPPED
    assert review.outcome == (
        "Not run: the monthly budget of the person whose turn it follows is used up; it "
        f"resets on {resets_on()}. The next review that runs reads these turns too."
    )
    assert len(fake.requests) == calls_before  # the model was never called
    assert review.iterations == 0 and review.finished_at is not None
    assert not UsageRecord.objects.filter(kind=Kind.REVIEW).exists()
    # A redelivered task does not run it again.
    run_review(review.pk)
    assert len(fake.requests) == calls_before
    assert Review.objects.get(pk=review.pk).status == Review.Status.SKIPPED

    # Next month (here: a raised cap), the next review reads the skipped one's turns too.
    budget.monthly_tokens = 1_000_000
    budget_save(budget=budget, by=ada)
    chat_turn(fake, "And I work on the billing service", person=owner)
    later = Review.objects.get(pk=queued[-1])
    assert later.covers_after_id == review.covers_after_id  # from before the skipped range
    fake.script(fake_openai.text("Nothing to save."))
    run_review(later.pk)
    assert Review.objects.get(pk=later.pk).status == Review.Status.DONE
    snapshot = fake.requests[-1]["messages"][1]["content"]
    assert "I prefer tea over coffee" in snapshot and "billing service" in snapshot


def test_a_review_under_the_cap_runs(fake, queued, every_turn, ada, owner):
    budget_save(budget=Budget(scope=Scope.PERSON, person=owner, monthly_tokens=100_000), by=ada)
    chat_turn(fake, "I prefer tea over coffee", person=owner)
    use_up(owner, 90_000)
    calls_before = len(fake.requests)
    fake.script(fake_openai.text("Nothing to save."))
    run_review(queued[-1])
    review = Review.objects.get(pk=queued[-1])
    assert review.status == Review.Status.DONE and review.outcome == "Nothing to save."
    assert len(fake.requests) == calls_before + 1


def test_a_review_in_a_chat_over_its_cap_is_skipped_for_an_unlinked_author(
    fake, queued, every_turn, ada
):
    turn = chat_turn(fake, "We deploy on Tuesdays", kind="group", chat_id="-100")
    budget_save(budget=Budget(scope=Scope.CHAT, chat=turn.chat, monthly_tokens=1), by=ada)
    calls_before = len(fake.requests)
    run_review(queued[-1])
    review = Review.objects.get(pk=queued[-1])
    assert review.status == Review.Status.SKIPPED
    assert review.outcome.startswith(
        "Not run: this chat's monthly budget of 1 token, set by ada, is used up; it resets on"
    )
    assert len(fake.requests) == calls_before


def test_another_persons_used_up_cap_does_not_hold_the_review(
    fake, queued, every_turn, ada, owner, member
):
    budget_save(budget=Budget(scope=Scope.PERSON, person=member, monthly_tokens=1), by=ada)
    use_up(member, 5)
    chat_turn(fake, "I prefer tea over coffee", person=owner)
    fake.script(fake_openai.text("Nothing to save."))
    run_review(queued[-1])
    assert Review.objects.get(pk=queued[-1]).status == Review.Status.DONE


def test_a_failing_review_gate_does_not_stop_the_review(fake, queued, every_turn):
    def broken(start):
        raise RuntimeError("the check is down")

    register_review_gate(broken)
    try:
        chat_turn(fake, "I prefer tea over coffee")
        fake.script(fake_openai.text("Nothing to save."))
        run_review(queued[-1])
    finally:
        unregister_review_gate(broken)
    assert Review.objects.get(pk=queued[-1]).status == Review.Status.DONE
