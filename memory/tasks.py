"""Celery tasks of the memory app: the hourly expiry of proposals past their time (beat
schedules it, see hermes_site.celery.periodic_tasks), so nothing waits for a page to be opened
before it expires and its chat hears of it."""

from celery import shared_task

EXPIRE_TASK = "memory.tasks.expire_proposals"


@shared_task(name=EXPIRE_TASK, ignore_result=True)
def expire_proposals() -> int:
    """Expire every memory proposal past `proposal_expires_at` (memory's one rule, audited and
    told to its chat by memory.services.memory_expire_proposals); idempotent."""
    from memory.services import memory_expire_proposals

    return memory_expire_proposals()
