"""Celery tasks of attachments: processing a stored file (on the files' queue) and the
periodic sweep of unused blobs."""

import threading

from celery import shared_task
from django.conf import settings

from attachments.processing import PROCESS_TASK
from attachments.services import SWEEP_GRACE, attachment_process, blobs_sweep
from attachments.sweeping import orphan_files_sweep

# Defined in attachments.telegram (beside what it runs), routed here with the files' work.
FETCH_TELEGRAM_TASK = "attachments.tasks.fetch_telegram_file"


def files_queue() -> str:
    """The files' queue, "<REDIS_KEY_PREFIX>-files": extraction, descriptions and
    transcription run there, never in a slot a turn waits for (`make run`'s background
    worker consumes it)."""
    return f"{settings.REDIS_KEY_PREFIX}-files"


def route_files(name, args, kwargs, options, task=None, **kw):
    """The Celery router of CELERY_TASK_ROUTES for the files' queue."""
    if name in (PROCESS_TASK, FETCH_TELEGRAM_TASK):
        return {"queue": files_queue()}
    return None


# One file at a time per process: `make run`'s background worker shares its threads with
# reviews and the schedules' dispatcher, which must always find one free. A second file
# arriving meanwhile goes back to the queue (BUSY_RETRY_SECONDS later).
_processing = threading.BoundedSemaphore(1)
BUSY_RETRY_SECONDS = 1


@shared_task(bind=True, name=PROCESS_TASK, ignore_result=True, acks_late=True, max_retries=None)
def process_attachment(self, attachment_id: int) -> str | None:
    """Derive what the hub knows of one stored file (docs/ATTACHMENTS.md)."""
    if not _processing.acquire(blocking=False):
        raise self.retry(countdown=BUSY_RETRY_SECONDS)
    try:
        attachment = attachment_process(attachment_id)
    finally:
        _processing.release()
    return attachment.state if attachment is not None else None


@shared_task(name="attachments.tasks.sweep_blobs", ignore_result=True)
def sweep_blobs() -> int:
    """Beat's periodic sweep: deletes blobs no attachment uses, then files in storage no blob
    names (left by a transaction that rolled back after writing them; docs/ATTACHMENTS.md)."""
    return blobs_sweep() + orphan_files_sweep(grace=SWEEP_GRACE)
