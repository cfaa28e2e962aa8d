"""The nudge counters and the trigger, through real turns: the fake model answers over HTTP,
the engine's post-turn hook counts, and the reviews it queues are recorded."""

import threading

import pytest
from django.db import close_old_connections, connection

from chats.agent.turns import turn_claim, turn_finish
from chats.models import Chat, Message, Turn
from learning.models import ChatLearning, Review
from learning.services import chat_learning_update, learning_turn_finished
from tests.fakes import openai_server as fake_openai
from tests.learning.helpers import calls, chat_turn, counters, run, say

pytestmark = pytest.mark.django_db(transaction=True)


def test_nine_user_turns_queue_nothing_the_tenth_queues_exactly_one_memory_review(fake, queued):
    for n in range(9):
        chat_turn(fake, f"message {n}")
    assert counters() == (9, 0)
    assert queued == [] and not Review.objects.exists()

    tenth = chat_turn(fake, "message 9")
    review = Review.objects.get()
    assert queued == [review.pk]
    assert review.focus == Review.Focus.MEMORY
    assert review.status == Review.Status.QUEUED
    assert review.turn == tenth and review.turn_number == 10
    assert review.trigger["user_turns"] == 10 and review.trigger["memory_interval"] == 10
    assert review.covers_after_id is None and review.covers_to_id == tenth.reply_id
    assert counters() == (0, 0)

    # The next ten start from zero and cover only what came after the first review (which a
    # worker ran meanwhile: one still queued would read on instead, see test_flooding).
    Review.objects.filter(pk=review.pk).update(status=Review.Status.DONE)
    for n in range(10):
        chat_turn(fake, f"again {n}")
    second = Review.objects.order_by("id").last()
    assert Review.objects.count() == 2 and queued == [review.pk, second.pk]
    assert second.covers_after_id == tenth.reply_id


def test_the_models_own_memory_call_resets_the_memory_counter(fake, queued):
    for n in range(6):
        chat_turn(fake, f"message {n}")
    assert counters() == (6, 0)
    chat_turn(
        fake,
        "I like tea",
        calls("memory", {"action": "add", "scope": "user", "content": "Likes tea."}),
        fake_openai.text("Noted."),
    )
    # The memory call made that turn's own count 0: it did the memory work itself.
    assert counters() == (0, 1)
    for n in range(9):
        chat_turn(fake, f"later {n}")
    assert not Review.objects.exists()  # 9 since the reset, not 16
    chat_turn(fake, "tenth")
    assert Review.objects.get().focus == Review.Focus.MEMORY


def test_tool_iterations_are_counted_across_the_whole_loop_of_a_turn(fake, queued):
    chat_turn(
        fake,
        "list the skills three times",
        calls("skills_list", {}, prefix="a"),
        calls("skills_list", {}, count=2, prefix="b"),  # two calls, one iteration
        calls("skills_list", {}, prefix="c"),
        fake_openai.text("done"),
    )
    assert counters() == (1, 3)
    done = Turn.objects.get()
    assert done.iterations == 4  # three tool steps and the final reply
    chat_turn(fake, "no tools")
    assert counters() == (2, 3)


def test_skill_iterations_queue_a_skills_review_and_skill_manage_resets(fake, queued, settings):
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 4
    chat_turn(fake, "work", *[calls("skills_list", {}, prefix=f"s{n}") for n in range(3)], "done")
    assert counters() == (1, 3) and not Review.objects.exists()
    skill = "---\nname: tea\ndescription: Make tea.\n---\n\nBoil water.\n"
    chat_turn(
        fake,
        "save it",
        calls("skills_list", {}, prefix="x"),
        calls("skill_manage", {"action": "create", "name": "tea", "content": skill}),
        "saved",
    )
    # 3 + 2 would cross 4, but the turn's own skill_manage resets it to 0 instead.
    assert counters() == (2, 0) and not Review.objects.exists()
    chat_turn(fake, "more", *[calls("skills_list", {}, prefix=f"m{n}") for n in range(4)], "done")
    review = Review.objects.get()
    assert review.focus == Review.Focus.SKILLS
    assert review.trigger["tool_iterations"] == 4 and review.trigger["skill_interval"] == 4
    assert counters() == (3, 0) and queued == [review.pk]


def test_both_counters_crossing_in_one_turn_queue_one_combined_review(fake, queued, settings):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 2
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 2
    chat_turn(fake, "one")
    chat_turn(fake, "two", calls("skills_list", {}, prefix="a"), calls("skills_list", {}), "ok")
    review = Review.objects.get()
    assert review.focus == Review.Focus.COMBINED
    assert counters() == (0, 0) and queued == [review.pk]


def test_interval_zero_disables_that_focus(fake, queued, settings):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 0
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 0
    for n in range(12):
        chat_turn(fake, f"message {n}", calls("skills_list", {}, prefix=f"t{n}"), "ok")
    assert not Review.objects.exists() and queued == []
    assert counters() == (12, 12)  # still counted, never due


def test_a_chat_overrides_the_intervals(fake, queued, settings):
    chat_turn(fake, "first", chat_id="1")
    chat_turn(fake, "first", chat_id="2", user="20", name="Bob")
    one = Chat.objects.get(external_id="1")
    chat_learning_update(chat=one, memory_interval=2, skill_interval=None, review_notice=False)
    two = Chat.objects.get(external_id="2")
    chat_learning_update(chat=two, memory_interval=0, skill_interval=None, review_notice=True)
    chat_turn(fake, "second", chat_id="1")
    assert Review.objects.get().chat == one  # 2 turns in chat 1
    for n in range(12):
        chat_turn(fake, f"more {n}", chat_id="2", user="20", name="Bob")
    assert Review.objects.filter(chat=two).count() == 0  # 0: no memory reviews there
    assert counters(chat_id="2")[0] == 13
    assert ChatLearning.objects.get(chat=two).review_notice is True


def test_failed_and_interrupted_turns_count_nothing(fake, queued):
    chat_turn(fake, "fine")
    fake.script(fake_openai.error(500))
    failed = run(say("this one fails"))
    assert failed.status == Turn.Status.FAILED
    assert counters() == (1, 0)

    turn = say("this one is stopped")
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert turn_finish(
        turn=claim.turn, status=Turn.Status.INTERRUPTED, reply_text="part", interrupt_reason="x"
    )
    assert counters() == (1, 0)
    assert learning_turn_finished(turn=claim.turn, status=Turn.Status.INTERRUPTED) is None
    assert counters() == (1, 0) and not Review.objects.exists()


def test_a_redis_outage_at_enqueue_marks_the_review_failed_and_the_chat_goes_on(
    fake, monkeypatch, settings
):
    from learning import tasks

    def down(review_id):
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(tasks.run_review, "delay", down)
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    done = chat_turn(fake, "hello")
    review = Review.objects.get()
    assert review.status == Review.Status.FAILED and "could not be queued" in review.error
    assert Message.objects.get(pk=done.reply_id).text == "ok"


@pytest.mark.parametrize("finishers", [10])
def test_counters_are_exact_when_turns_finish_at_the_same_moment(queued, finishers):
    """Turns finishing concurrently (several workers) lose no count: exactly one review."""
    turns = []
    for n in range(finishers):
        turn = say(f"message {n}")
        Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.COMPLETED)
        turns.append(turn)
    barrier = threading.Barrier(finishers)
    errors = []

    def finish(turn):
        try:
            barrier.wait()
            learning_turn_finished(turn=turn, status=Turn.Status.COMPLETED)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=finish, args=(turn,)) for turn in turns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Review.objects.count() == 1 and len(queued) == 1
    assert counters() == (0, 0)


def test_each_area_reads_on_from_its_own_last_review_and_a_failed_one_read_nothing(
    fake, queued, settings
):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 2
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 1
    first = chat_turn(fake, "I deploy from the release branch.")
    chat_turn(fake, "list skills", calls("skills_list", {}), "none yet")
    combined = Review.objects.get()
    assert combined.focus == Review.Focus.COMBINED and combined.covers_after_id is None
    Review.objects.filter(pk=combined.pk).update(status=Review.Status.DONE)  # a worker ran it
    chat_turn(fake, "list again", calls("skills_list", {}), "still none")
    skills = Review.objects.order_by("id").last()
    assert skills.focus == Review.Focus.SKILLS
    assert skills.covers_after_id == combined.covers_to_id
    skills.status = Review.Status.FAILED
    skills.save(update_fields=["status"])
    third = chat_turn(fake, "once more", calls("skills_list", {}), "none")
    # Memory was last reviewed by the combined review; skills' last review failed, so the
    # next combined one starts after the combined review for both.
    last = Review.objects.order_by("id").last()
    assert last.focus == Review.Focus.COMBINED
    assert last.covers_after_id == combined.covers_to_id and last.covers_to_id == third.reply_id
    assert first.reply_id < combined.covers_to_id


def test_the_counters_run_after_people_saw_the_reply(fake, queued, monkeypatch):
    """The learning receiver never delays the final event: it runs after it is published."""
    from chats.agent import events
    from chats.signals import turn_finished

    order = []
    publish = events.publish

    def recording_publish(chat_id, event_type, **data):
        order.append(event_type)
        return publish(chat_id, event_type, **data)

    def receiver(sender, turn, status, **kwargs):
        order.append(f"receiver:{status}")

    monkeypatch.setattr(events, "publish", recording_publish)
    turn_finished.connect(receiver, dispatch_uid="test-order", weak=False)
    try:
        chat_turn(fake, "hello")
    finally:
        turn_finished.disconnect(dispatch_uid="test-order")
    assert order.index("turn.finished") < order.index("receiver:completed")
    assert order[-1] == "receiver:completed"
