"""Celery tasks of the learning loop: background reviews and the periodic skills curator,
both on the reviews' queue, never in a slot a turn waits for."""

import logging
import threading

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

logger = logging.getLogger(__name__)

REVIEW_TASK = "learning.tasks.run_review"
CURATOR_TASK = "learning.tasks.run_curator"


def review_queue() -> str:
    """The reviews' queue, "<REDIS_KEY_PREFIX>-reviews": `make run` starts one worker on it
    with concurrency 1, apart from the worker that runs turns."""
    return f"{settings.REDIS_KEY_PREFIX}-reviews"


def route_review(name, args, kwargs, options, task=None, **kw):
    """The Celery router of CELERY_TASK_ROUTES: reviews and the curator go to the reviews'
    queue (read when a task is sent, so the key prefix of the running installation applies)."""
    if name in (REVIEW_TASK, CURATOR_TASK):
        return {"queue": review_queue()}
    return None


# One review or curator pass at a time per process: `make run`'s background worker shares
# its two threads with the schedules' dispatcher, which must always find one free. A second
# review arriving meanwhile goes back to the queue (BUSY_RETRY_SECONDS later) instead of
# holding the dispatcher's thread.
_reviewing = threading.BoundedSemaphore(1)
BUSY_RETRY_SECONDS = 5


@shared_task(bind=True, name=REVIEW_TASK, ignore_result=True, acks_late=True, max_retries=None)
def run_review(self, review_id: int) -> str:
    """Run a queued review once (a redelivered task finds it started and does nothing)."""
    from learning.review import review_run

    if not _reviewing.acquire(blocking=False):
        raise self.retry(countdown=BUSY_RETRY_SECONDS)
    try:
        review = review_run(review_id=review_id, worker=self.request.hostname or "worker")
    finally:
        _reviewing.release()
    return review.status if review is not None else "gone"


@shared_task(bind=True, name=CURATOR_TASK, ignore_result=True, max_retries=None)
def run_curator(self) -> str:
    """One curator pass (learning.curator): idempotent, so a doubled or redelivered run
    changes nothing more; its summary is the result."""
    from learning.curator import curator_run

    if not _reviewing.acquire(blocking=False):
        raise self.retry(countdown=BUSY_RETRY_SECONDS)
    try:
        return curator_run().summary()
    finally:
        _reviewing.release()


@worker_ready.connect
def fail_reviews_of_dead_worker(sender=None, **kwargs) -> None:
    """A starting worker marks reviews its previous life left running as failed: they
    were cut off (their proposals so far are kept) and are never run again."""
    from learning.review import reviews_fail_abandoned

    hostname = getattr(sender, "hostname", None)
    if hostname:
        count = reviews_fail_abandoned(worker=hostname)
        if count:
            logger.warning("marked %s review(s) of a dead worker as failed", count)
