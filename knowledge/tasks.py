"""Celery tasks of team knowledge, on the files' queue that the background worker reads
(never a slot a turn waits for): a collection's folder sync, the periodic re-sync of every
collection with a folder (beat, KNOWLEDGE_SYNC_SECONDS), and embedding passages left without
a vector (sent by each periodic re-sync, a batch per task). Indexing and embedding never
run in a web request."""

import logging

from celery import shared_task

from knowledge.jobs import EMBED_ROUND, knowledge_job

logger = logging.getLogger(__name__)

SYNC_TASK = "knowledge.tasks.sync_collection"
RESYNC_TASK = "knowledge.tasks.resync_all"
EMBED_TASK = "knowledge.tasks.embed_missing"
_OURS = (SYNC_TASK, RESYNC_TASK, EMBED_TASK)


def route_knowledge(name, args, kwargs, options, task=None, **kw):
    """The Celery router of CELERY_TASK_ROUTES: knowledge's tasks to the files' queue."""
    if name in _OURS:
        from attachments.tasks import files_queue

        return {"queue": files_queue()}
    return None


@shared_task(bind=True, name=SYNC_TASK, ignore_result=True, max_retries=None)
def sync_collection(self, collection_id: int, trigger: str = "periodic") -> dict | None:
    """Sync one collection from its folder (knowledge.sync.collection_sync); a collection
    whose sync is running already, or that has no folder, is left alone. Back to the queue
    while this process runs another knowledge job."""
    with knowledge_job(self):
        counts = _sync(collection_id, trigger)
    if counts is not None:
        embed_missing.delay()  # the second pass, a batch per task (the job is free again)
    return counts


def _sync(collection_id: int, trigger: str) -> dict | None:
    from knowledge.models import Collection
    from knowledge.sync import SyncBusy, collection_sync

    collection = Collection.objects.filter(pk=collection_id).first()
    if collection is None or not collection.source_path:
        return None
    try:
        return collection_sync(
            collection=collection, path=collection.source_path, trigger=trigger, embed=False
        ).counts
    except SyncBusy:
        return None
    except FileNotFoundError:
        logger.warning(
            "knowledge: the folder of %s is gone: %s", collection, collection.source_path
        )
        return None


@shared_task(name=RESYNC_TASK, ignore_result=True)
def resync_all() -> int:
    """Enqueue a sync of every collection that has a folder; returns how many."""
    from knowledge.models import Collection

    ids = list(Collection.objects.exclude(source_path="").values_list("pk", flat=True))
    for collection_id in ids:
        sync_collection.delay(collection_id)
    # Passages no sync sent it for (uploads stored while the embeddings server was down).
    embed_missing.delay()
    return len(ids)


@shared_task(bind=True, name=EMBED_TASK, ignore_result=True, max_retries=None)
def embed_missing(self) -> int:
    """Embed a batch of passages without a vector of the current model (stored by a sync or
    an upload, or while the embeddings server was down), then send itself again while
    batches come full: other work on the files' queue, other knowledge jobs included, runs
    between batches (the offline model makes a few passages a second)."""
    from knowledge.indexing import passages_embed_missing

    with knowledge_job(self):
        done = passages_embed_missing(limit=EMBED_ROUND)
    if done >= EMBED_ROUND:
        embed_missing.delay()
    return done
