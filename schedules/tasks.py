"""Celery tasks of schedules: the dispatcher beat runs every SCHEDULES_DISPATCH_SECONDS."""

from celery import shared_task

from schedules.dispatch import dispatch as dispatch_pass


@shared_task(ignore_result=True, acks_late=False)
def dispatch() -> dict:
    """One dispatcher pass (schedules.dispatch): each slot is claimed and run once even with
    several beats; cheap when nothing is due (a heartbeat write and three indexed reads)."""
    result = dispatch_pass()
    return {
        "claimed": result.claimed,
        "missed": result.missed,
        "started": result.started,
        "waiting": result.waiting,
        "settled": result.settled,
        "paused": result.paused,
    }
