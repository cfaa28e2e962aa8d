"""Celery task of voice: transcribing one stored recording on the voice queue."""

import threading

from celery import shared_task
from django.conf import settings

from attachments.services import attachment_process
from voice.tasks_names import TRANSCRIBE_TASK


def voice_queue() -> str:
    """ "<REDIS_KEY_PREFIX>-voice": transcription never takes a turn's slot nor the files'
    queue (`make run`'s background worker reads it beside the files' queue)."""
    return f"{settings.REDIS_KEY_PREFIX}-voice"


def route_voice(name, args, kwargs, options, task=None, **kw):
    """The Celery router of CELERY_TASK_ROUTES for the voice queue."""
    if name == TRANSCRIBE_TASK:
        return {"queue": voice_queue()}
    return None


# One recording at a time per process (it holds a thread of the shared background worker
# while its child runs); a second one waits on the queue.
_transcribing = threading.BoundedSemaphore(1)
BUSY_RETRY_SECONDS = 2


@shared_task(
    bind=True,
    name=TRANSCRIBE_TASK,
    ignore_result=True,
    acks_late=True,
    max_retries=None,
    # Enforced by prefork pools; the threads pool of `make run` relies on the child's own
    # wall-clock bound (VOICE_TRANSCRIBE_SECONDS), which kills it first.
    soft_time_limit=settings.VOICE_TRANSCRIBE_SECONDS + 30,
    time_limit=settings.VOICE_TRANSCRIBE_SECONDS + 60,
)
def transcribe_attachment(self, attachment_id: int) -> str | None:
    """Transcribe one recording and settle its attachment (voice.processor, docs/VOICE.md)."""
    if not _transcribing.acquire(blocking=False):
        raise self.retry(countdown=BUSY_RETRY_SECONDS)
    try:
        attachment = attachment_process(attachment_id)
    finally:
        _transcribing.release()
    return attachment.state if attachment is not None else None
