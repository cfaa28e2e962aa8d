"""Celery tasks of the tools app: the expiry of tool calls waiting for a decider (beat)."""

from celery import shared_task

from toolservers.approvals import approvals_expire


@shared_task(ignore_result=True, acks_late=False)
def expire_approvals() -> int:
    """Deny calls nobody decided within TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS and queue their
    turns again (beat runs it every TOOLSERVERS_APPROVAL_SWEEP_SECONDS); cheap when none is
    due (one indexed query)."""
    return approvals_expire()
