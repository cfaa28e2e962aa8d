"""Celery tasks of attachments."""

from celery import shared_task

from attachments.services import blobs_sweep


@shared_task(name="attachments.tasks.sweep_blobs", ignore_result=True)
def sweep_blobs() -> int:
    """Beat's periodic sweep: deletes blobs no attachment uses (docs/FILES.md)."""
    return blobs_sweep()
