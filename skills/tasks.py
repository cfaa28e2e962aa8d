"""Celery tasks of the skills app: the hourly expiry of proposals nobody will decide (beat
schedules it, see hermes_site.celery.periodic_tasks)."""

from celery import shared_task

EXPIRE_TASK = "skills.tasks.expire_proposals"


@shared_task(name=EXPIRE_TASK, ignore_result=True)
def expire_proposals() -> int:
    """Expire skill proposals past SKILLS_PROPOSAL_TTL_DAYS or on an archived skill, audited
    and told to their chats (skills.expiry); idempotent. Returns how many expired."""
    from skills.expiry import skill_proposals_expire

    return len(skill_proposals_expire())
