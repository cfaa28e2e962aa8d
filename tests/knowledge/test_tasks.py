"""The periodic re-sync: beat sends it, it runs on the files' queue (the background worker's,
never a turn's), and a collection's sync there follows its folder."""

import pytest

from hermes_site.celery import app, periodic_tasks
from knowledge.models import Document
from knowledge.sync import collection_for_sync
from knowledge.tasks import (
    EMBED_TASK,
    RESYNC_TASK,
    SYNC_TASK,
    embed_missing,
    resync_all,
    sync_collection,
)

pytestmark = pytest.mark.django_db


def test_beat_sends_the_resync_and_the_tasks_run_on_the_files_queue(settings):
    assert ("resync-knowledge", RESYNC_TASK, settings.KNOWLEDGE_SYNC_SECONDS) in periodic_tasks()
    settings.KNOWLEDGE_SYNC_SECONDS = 0
    assert RESYNC_TASK not in {task for _, task, _ in periodic_tasks()}
    for name in (SYNC_TASK, RESYNC_TASK, EMBED_TASK):
        route = app.amqp.router.route({}, name)
        assert route["queue"].name == f"{settings.REDIS_KEY_PREFIX}-files"


def test_a_periodic_sync_follows_the_folder(tmp_path, monkeypatch):
    from knowledge.models import Passage

    (tmp_path / "a.md").write_text("# A\nAlpha.")
    collection, _ = collection_for_sync(name="Docs", path=str(tmp_path))
    embeds = []
    monkeypatch.setattr(embed_missing, "delay", lambda: embeds.append(1))
    assert sync_collection(collection.pk) == {
        "added": 1, "changed": 0, "unchanged": 0, "removed": 0, "failed": 0,
    }  # fmt: skip
    # Stored, not embedded: the task it sent embeds, a batch per task.
    assert embeds == [1] and Passage.objects.get().embedding_model == ""
    assert embed_missing() == 1 and Passage.objects.get().embedding_model
    (tmp_path / "a.md").unlink()
    (tmp_path / "b.md").write_text("# B\nBeta.")
    sent = []
    monkeypatch.setattr(sync_collection, "delay", lambda pk: sent.append(pk))
    monkeypatch.setattr(embed_missing, "delay", lambda: sent.append("embed"))
    embeds.clear()
    assert resync_all() == 1 and sent == [collection.pk, "embed"]
    sync_collection(collection.pk)
    assert list(Document.objects.values_list("path", flat=True)) == ["b.md"]


def test_a_collection_whose_folder_is_gone_is_left_alone(tmp_path):
    collection, _ = collection_for_sync(name="Docs", path=str(tmp_path / "gone"))
    assert sync_collection(collection.pk) is None
    assert sync_collection(999_999) is None


def test_passages_left_without_vectors_are_embedded_a_batch_per_task(monkeypatch):
    from knowledge import tasks
    from knowledge.embeddings import embedder_name
    from knowledge.models import Passage
    from tests.knowledge.helpers import add_document, runbooks

    collection = runbooks()
    for number in range(3):
        add_document(collection, f"more-{number}.md", f"# More {number}\nText {number}.")
    Passage.objects.update(embedding=None, embedding_model="")
    total = Passage.objects.count()
    monkeypatch.setattr(tasks, "EMBED_ROUND", 2)
    sent = []
    monkeypatch.setattr(embed_missing, "delay", lambda: sent.append("again"))
    rounds = 0
    while True:
        rounds += 1
        sent.clear()
        done = embed_missing()
        assert done <= 2 and sent == (["again"] if done == 2 else [])
        if not sent:
            break
    assert rounds == total // 2 + 1
    assert not Passage.objects.exclude(embedding_model=embedder_name()).exists()


def test_one_knowledge_job_at_a_time_holds_a_background_thread(tmp_path, monkeypatch):
    from celery.exceptions import Retry

    from knowledge import jobs
    from knowledge.models import Passage
    from tests.knowledge.helpers import add_document, runbooks

    (tmp_path / "a.md").write_text("# A\nAlpha.")
    collection, _ = collection_for_sync(name="Docs", path=str(tmp_path))
    add_document(runbooks(), "more.md", "# More\nText.")
    Passage.objects.update(embedding=None, embedding_model="")
    monkeypatch.setattr(embed_missing, "delay", lambda: None)
    assert jobs._working.acquire(blocking=False)  # a sync of another collection runs here
    try:
        with pytest.raises(Retry):
            sync_collection(collection.pk)  # back to the queue, not a second thread
        with pytest.raises(Retry):
            embed_missing()
        assert not Document.objects.filter(collection=collection).exists()
    finally:
        jobs._working.release()
    assert sync_collection(collection.pk)["added"] == 1
    assert embed_missing() > 0


def test_an_upload_and_a_chat_file_wait_for_the_knowledge_job_too():
    from celery.exceptions import Retry

    from knowledge import jobs
    from knowledge.chat_files import index_attachment
    from knowledge.uploads import index_upload

    assert jobs._working.acquire(blocking=False)
    try:
        with pytest.raises(Retry):
            index_upload(999_999)
        with pytest.raises(Retry):
            index_attachment(999_999, 999_999, None)
    finally:
        jobs._working.release()
    assert index_upload(999_999) is None and index_attachment(999_999, 999_999, None) == "gone"
