"""Celery tasks of schedules: the dispatcher beat runs every SCHEDULES_DISPATCH_SECONDS, on
a queue of its own ("<REDIS_KEY_PREFIX>-schedules") that only the schedules worker takes,
so turns that keep every turn worker busy for minutes never delay a slot."""

from celery import shared_task
from django.conf import settings

from schedules.dispatch import dispatch as dispatch_pass

DISPATCH_TASK = "schedules.tasks.dispatch"


def dispatch_queue() -> str:
    """The dispatcher's queue, "<REDIS_KEY_PREFIX>-schedules": `make run` starts one worker
    on it (solo pool), apart from the workers that run turns."""
    return f"{settings.REDIS_KEY_PREFIX}-schedules"


def route_dispatch(name, args, kwargs, options, task=None, **kw):
    """The Celery router of CELERY_TASK_ROUTES: the dispatcher goes to its own queue (read
    when a task is sent, so the key prefix of the running installation applies)."""
    if name == DISPATCH_TASK:
        return {"queue": dispatch_queue()}
    return None


@shared_task(name=DISPATCH_TASK, ignore_result=True, acks_late=False)
def dispatch() -> dict:
    """One dispatcher pass (schedules.dispatch): each slot is claimed and run once even with
    several beats or several schedules workers; cheap when nothing is due (a heartbeat
    write and three indexed reads)."""
    result = dispatch_pass()
    return {
        "claimed": result.claimed,
        "missed": result.missed,
        "started": result.started,
        "waiting": result.waiting,
        "settled": result.settled,
        "paused": result.paused,
    }
