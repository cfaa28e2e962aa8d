"""One room cannot flood the reviews' queue: owners cannot set intervals under the minimum
(staff can, for a chat), a chat has at most one queued review per area (a second crossing
joins it), and another chat's review is served after at most one of the busy chat's."""

import json
from urllib.parse import quote

import pytest
import redis

from chats.models import Chat, ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from hermes_site.celery import app
from learning.models import ChatLearning, Review
from learning.services import IntervalTooShort, chat_learning_settings_update
from learning.tasks import REVIEW_TASK, review_queue, run_review
from tests.chats.dashboard_helpers import login
from tests.fakes import openai_server as fake_openai
from tests.learning.helpers import chat_turn

pytestmark = pytest.mark.django_db(transaction=True)

A = {"chat_id": "-1", "kind": "group", "user": "10", "name": "Alice"}
B = {"chat_id": "-2", "kind": "group", "user": "20", "name": "Bob"}


def settings_url(chat):
    return f"/chats/{quote(chat.chat_key, safe='/:')}/learning/settings"


@pytest.fixture
def room(owner, member):
    chat, _ = chat_get_or_create(channel="web", chat_id="busy-room", title="Busy room")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    return chat


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


def interval_one(staff, **where):
    """Staff set memory reviews after every user turn in the chat of `where`."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id=where["chat_id"], kind="group")
    chat_learning_settings_update(
        chat=chat, person=staff, memory_interval=1, skill_interval=0, review_notice=False
    )
    return chat


# --- the minimum interval ---------------------------------------------------------------


def test_an_owner_cannot_set_an_interval_under_the_minimum(owner, room, settings):
    settings.LEARNING_MIN_INTERVAL = 5
    client = login(owner)
    response = client.post(
        settings_url(room),
        {"memory_interval": "1", "skill_interval": "1"},
        headers={"HX-Request": "true"},
    )
    fragment = response.content.decode()
    assert response.status_code == 400
    assert 'id="id_memory_interval_error"' in fragment
    assert "Enter 5 or more (0 turns these reviews off)" in fragment
    assert not ChatLearning.objects.filter(chat=room).exists()  # nothing written
    with pytest.raises(IntervalTooShort) as refused:
        chat_learning_settings_update(
            chat=room, person=owner, memory_interval=10, skill_interval=4, review_notice=False
        )
    assert refused.value.field == "skill_interval"
    # The minimum itself, 0 (off) and the site default are fine.
    for memory, skill in ((5, 0), (None, 5)):
        chat_learning_settings_update(
            chat=room,
            person=owner,
            memory_interval=memory,
            skill_interval=skill,
            review_notice=False,
        )
    learning = ChatLearning.objects.get(chat=room)
    assert (learning.memory_interval, learning.skill_interval) == (None, 5)


def test_staff_may_lower_it_for_a_chat_and_its_owner_then_keeps_it(owner, room, staff, settings):
    settings.LEARNING_MIN_INTERVAL = 5
    chat_member_ensure(chat=room, person=staff)
    response = login(staff).post(
        settings_url(room), {"memory_interval": "1", "skill_interval": "2"}
    )
    assert response.status_code == 302
    # Saving the form again (the notice switched on) keeps staff's value; lowering further not.
    response = login(owner).post(
        settings_url(room), {"memory_interval": "1", "skill_interval": "2", "review_notice": "on"}
    )
    assert response.status_code == 302
    learning = ChatLearning.objects.get(chat=room)
    assert (learning.memory_interval, learning.skill_interval, learning.review_notice) == (
        1,
        2,
        True,
    )
    with pytest.raises(IntervalTooShort):
        chat_learning_settings_update(
            chat=room, person=owner, memory_interval=1, skill_interval=1, review_notice=True
        )
    assert ChatLearning.objects.get(chat=room).skill_interval == 2


# --- one queued review per chat and area --------------------------------------------------


def test_four_turns_at_interval_one_queue_one_review_that_reads_all_four(
    fake, queued, staff, settings
):
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    chat = interval_one(staff, **A)
    turns = [chat_turn(fake, f"message {n}", **A) for n in range(4)]
    review = Review.objects.get(chat=chat)
    assert queued == [review.pk]
    assert review.status == Review.Status.QUEUED and review.focus == Review.Focus.MEMORY
    assert review.turn == turns[-1] and review.turn_number == 4
    assert review.covers_after_id is None and review.covers_to_id == turns[-1].reply_id
    assert review.trigger["coalesced"] == 3
    assert ChatLearning.objects.get(chat=chat).user_turns_since_memory_review == 0

    fake.script(fake_openai.text("Nothing to save."))
    before = len(fake.requests)
    run_review(review.pk)
    snapshot = fake.requests[before]["messages"][1]["content"]
    assert all(f"[Alice] message {n}" in snapshot for n in range(4))


def test_a_crossing_while_the_review_runs_queues_one_more_that_reads_on(
    fake, queued, staff, settings
):
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    chat = interval_one(staff, **A)
    chat_turn(fake, "first", **A)
    first = Review.objects.get(chat=chat)
    Review.objects.filter(pk=first.pk).update(status=Review.Status.RUNNING)  # a worker took it
    later = [chat_turn(fake, f"later {n}", **A) for n in range(3)]
    second = Review.objects.exclude(pk=first.pk).get(chat=chat)
    assert queued == [first.pk, second.pk]
    assert second.covers_after_id == first.covers_to_id
    assert second.covers_to_id == later[-1].reply_id


def test_one_queued_review_per_area_a_skills_crossing_queues_its_own(fake, queued, staff, settings):
    chat = interval_one(staff, **A)
    chat_learning_settings_update(
        chat=chat, person=staff, memory_interval=1, skill_interval=1, review_notice=False
    )
    chat_turn(fake, "hello", **A)  # memory only: no tool call
    chat_turn(
        fake,
        "list skills",
        fake_openai.tool_calls([("c1", "skills_list", {})]),
        fake_openai.text("none"),
        **A,
    )  # memory joins the queued one; skills queue their own
    chat_turn(
        fake,
        "again",
        fake_openai.tool_calls([("c2", "skills_list", {})]),
        fake_openai.text("none"),
        **A,
    )  # both join
    reviews = list(Review.objects.filter(chat=chat).order_by("id"))
    assert [review.focus for review in reviews] == [Review.Focus.MEMORY, Review.Focus.SKILLS]
    assert queued == [review.pk for review in reviews]
    assert {review.turn_number for review in reviews} == {3}


def test_a_combined_crossing_joins_a_queued_combined_review(fake, queued, staff, settings):
    chat = interval_one(staff, **A)
    chat_learning_settings_update(
        chat=chat, person=staff, memory_interval=1, skill_interval=1, review_notice=False
    )
    for n in range(3):
        chat_turn(
            fake,
            f"deploy {n}",
            fake_openai.tool_calls([(f"c{n}", "skills_list", {})]),
            fake_openai.text("done"),
            **A,
        )
    review = Review.objects.get(chat=chat)
    assert review.focus == Review.Focus.COMBINED and queued == [review.pk]
    assert review.trigger["coalesced"] == 2


# --- fairness between chats ---------------------------------------------------------------


def test_another_chats_review_is_not_starved_by_a_busy_chat(fake, queued, staff, settings):
    """The queue is served in order and holds one review per chat and area: chat B's review
    runs after at most one of chat A's, however many turns A has."""
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    busy = interval_one(staff, **A)
    quiet = interval_one(staff, **B)
    for n in range(4):
        chat_turn(fake, f"busy {n}", **A)
    chat_turn(fake, "quiet one", **B)
    for n in range(4):
        chat_turn(fake, f"busy again {n}", **A)  # A's review still waits: they join it
    a_first, b_first = (Review.objects.get(chat=chat).pk for chat in (busy, quiet))
    assert queued == [a_first, b_first]

    # The worker serves the queue in order: A's review, then, while A talks on, B's.
    served = []
    for _ in range(2):
        review_id = queued[len(served)]
        fake.script(fake_openai.text("Nothing to save."))
        run_review(review_id)
        served.append(review_id)
        for n in range(4):
            chat_turn(fake, f"meanwhile {len(served)} {n}", **A)
    assert served == [a_first, b_first]
    assert Review.objects.get(pk=b_first).status == Review.Status.DONE
    assert Review.objects.filter(chat=busy, status=Review.Status.QUEUED).count() == 1
    assert len(queued) == 3  # A's second review, behind B's


def test_in_redis_a_busy_chat_has_one_message_and_the_next_chat_comes_second(fake, staff, settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("no Redis at REDIS_URL")
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    interval_one(staff, **A)
    interval_one(staff, **B)
    queue = review_queue()
    client.delete(queue)
    turns_before = client.llen(app.conf.task_default_queue)
    for n in range(4):
        chat_turn(fake, f"busy {n}", **A)
    chat_turn(fake, "quiet one", **B)
    sent = [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
    client.delete(queue)
    assert [message["headers"]["task"] for message in sent] == [REVIEW_TASK, REVIEW_TASK]
    # Celery pushes on the left and the worker pops on the right: the oldest is last.
    ids = [message["headers"]["argsrepr"] for message in reversed(sent)]
    chats = [Review.objects.get(pk=int(text.strip("(),"))).chat.external_id for text in ids]
    assert chats == ["-1", "-2"]
    assert client.llen(app.conf.task_default_queue) == turns_before
    assert Chat.objects.count() == 2
