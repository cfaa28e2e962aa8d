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
    reviews = procs["reviews"]
    assert reviews[reviews.index("-Q") + 1] == "acme-reviews"
    assert reviews[reviews.index("--concurrency") + 1] == "1"
    assert "-B" not in reviews  # beat runs once, in the main worker
    assert "-Q" not in procs["worker"]  # the main worker takes the default queue only
    assert "reviews" in READY_LINES
    assert processes({"PORT": "8000"})["reviews"][reviews.index("-Q") + 1] == "hermes-reviews"


def test_a_restarted_worker_fails_the_reviews_it_left_running(fake, queued, settings):
    from learning.review import reviews_fail_abandoned

    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    chat_turn(fake, "hello")
    Review.objects.update(status=Review.Status.RUNNING, worker="reviews@box")
    assert reviews_fail_abandoned(worker="celery@box") == 0
    assert reviews_fail_abandoned(worker="reviews@box") == 1
    review = Review.objects.get()
    assert review.status == Review.Status.FAILED and "stopped" in review.error
