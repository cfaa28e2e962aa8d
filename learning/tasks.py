"""Celery tasks of the learning loop: background reviews and the periodic skills curator,
both on the reviews' queue, never in a slot a turn waits for."""

import logging

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


@shared_task(bind=True, name=REVIEW_TASK, ignore_result=True, acks_late=True)
def run_review(self, review_id: int) -> str:
    """Run a queued review once (a redelivered task finds it started and does nothing)."""
    from learning.review import review_run

    review = review_run(review_id=review_id, worker=self.request.hostname or "worker")
    return review.status if review is not None else "gone"


@shared_task(name=CURATOR_TASK, ignore_result=True)
def run_curator() -> str:
    """One curator pass (learning.curator): idempotent, so a doubled or redelivered run
    changes nothing more; its summary is the result."""
    from learning.curator import curator_run

    return curator_run().summary()


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
