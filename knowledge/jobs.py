"""One knowledge job at a time per process: a folder sync, an upload's indexing, a chat file
added to a collection or a batch of embeddings. `make run`'s background worker shares its
threads with reviews, files, transcription and the schedules' dispatcher, each of which
holds one at most, so the dispatcher always finds one free (hermes_site/runner.py). A task
arriving meanwhile goes back to the queue for BUSY_RETRY_SECONDS. No job holds it long: a
sync or an upload stores text (minutes for thousands of files), and embedding, hours on the
offline model, goes a batch per task (knowledge.tasks.embed_missing)."""

import threading
from contextlib import contextmanager

_working = threading.BoundedSemaphore(1)
BUSY_RETRY_SECONDS = 10
# Passages embedded per round, in a sync's second pass or per `embed_missing` task (~25 s of
# the offline model): a heartbeat, or other work on the queue, between two rounds.
EMBED_ROUND = 64


@contextmanager
def knowledge_job(task):
    """Run the body as this process's one knowledge job, or send `task` (a bound Celery
    task) back to the queue."""
    if not _working.acquire(blocking=False):
        raise task.retry(countdown=BUSY_RETRY_SECONDS)
    try:
        yield
    finally:
        _working.release()
