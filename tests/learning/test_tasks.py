"""Reviews travel on their own Celery queue, and `make run` gives them their own worker."""

import json

import pytest
import redis
from django.conf import settings

from hermes_site.celery import app
from learning.models import Review
from learning.tasks import REVIEW_TASK, review_queue, route_review
from tests.learning.helpers import chat_turn

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_review_task_is_routed_to_the_reviews_queue_and_turns_are_not():
    assert "learning.tasks.route_review" in settings.CELERY_TASK_ROUTES
    assert review_queue() == f"{settings.REDIS_KEY_PREFIX}-reviews"
    assert route_review(REVIEW_TASK, (1,), {}, {}) == {"queue": review_queue()}
    assert route_review("chats.tasks.run_turn", (1,), {}, {}) is None
    routed = app.amqp.router.route({}, REVIEW_TASK, args=(1,), kwargs={})
    assert routed["queue"].name == review_queue()
    turn = app.amqp.router.route({}, "chats.tasks.run_turn", args=(1,), kwargs={})
    assert turn["queue"].name == app.conf.task_default_queue != review_queue()


def test_a_crossing_turn_sends_the_review_to_the_reviews_queue_in_redis(fake, settings):
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip("no Redis at REDIS_URL")
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    reviews_before = client.llen(review_queue())
    turns_before = client.llen(app.conf.task_default_queue)
    chat_turn(fake, "hello")
    review = Review.objects.get()
    assert client.llen(review_queue()) == reviews_before + 1
    assert client.llen(app.conf.task_default_queue) == turns_before
    sent = json.loads(client.lpop(review_queue()))
    assert sent["headers"]["task"] == REVIEW_TASK
    assert sent["headers"]["argsrepr"] == f"({review.pk},)"


def test_make_run_starts_a_review_worker_on_that_queue_one_review_at_a_time():
    from hermes_site.runner import READY_LINES, processes

    procs = processes({"PORT": "8000", "REDIS_KEY_PREFIX": "acme"})
    background = procs["background"]
    assert background[background.index("-Q") + 1].split(",") == [
        "acme-reviews",
        "acme-schedules",
        "acme-files",
        "acme-voice",
    ]
    assert "-B" not in background and "--beat-thread" not in background  # beat runs once
    assert "-Q" not in procs["worker"]  # the main worker takes the default queue only
    assert "background" in READY_LINES
    split = processes({"PORT": "8000", "HERMES_PROCESS_LAYOUT": "split"})["reviews"]
    assert split[split.index("-Q") + 1] == "hermes-reviews,hermes-files,hermes-voice"
    assert split[split.index("--concurrency") + 1] == "1"


def test_a_second_review_while_one_runs_goes_back_to_the_queue_leaving_the_thread_free(
    fake, queued, settings
):
    """The background worker's two threads: a review holds at most one of them, so the
    schedules' dispatcher always finds the other."""
    from celery.exceptions import Retry

    from learning import tasks

    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    chat_turn(fake, "hello")
    review = Review.objects.get()
    assert tasks._reviewing.acquire(blocking=False)  # a review is running in this process
    try:
        with pytest.raises(Retry):
            tasks.run_review.apply(args=(review.pk,), throw=True)
        with pytest.raises(Retry):
            tasks.run_curator.apply(throw=True)
    finally:
        tasks._reviewing.release()
    review.refresh_from_db()
    assert review.status == Review.Status.QUEUED  # untouched: it runs when retried
    fake.script("nothing to keep")
    tasks.run_review(review.pk)  # the thread is free again: it runs
    review.refresh_from_db()
    assert review.status != Review.Status.QUEUED


def test_a_restarted_worker_fails_the_reviews_it_left_running(fake, queued, settings):
    from learning.review import reviews_fail_abandoned

    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    chat_turn(fake, "hello")
    Review.objects.update(status=Review.Status.RUNNING, worker="reviews@box")
    assert reviews_fail_abandoned(worker="celery@box") == 0
    assert reviews_fail_abandoned(worker="reviews@box") == 1
    review = Review.objects.get()
    assert review.status == Review.Status.FAILED and "stopped" in review.error
