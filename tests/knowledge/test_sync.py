"""A folder on the server into a collection: incremental by content hash, deletions followed,
symlinks never followed, bad files get a state and a reason without stopping the sync, a
crashed run is resumed, every change audited; through the operator's command too."""

import os
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from chats.models import ChatMember
from knowledge.models import ChatCollection, Collection, Document, KnowledgeEvent, SyncRun
from knowledge.search import fulltext_search
from knowledge.sync import SyncBusy, collection_sync
from knowledge.vectors import forget
from tests.attachments.documents import docx_bytes, pdf_bytes

pytestmark = pytest.mark.django_db
Kind = KnowledgeEvent.Kind


@pytest.fixture(autouse=True)
def _fresh_vector_cache():
    forget()
    yield
    forget()


def write(folder, relative, content):
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def sync(folder, name="Runbooks", **kwargs):
    out = StringIO()
    call_command("knowledge", "sync", name, str(folder), stdout=out, **kwargs)
    return out.getvalue()


def states():
    return {d.path: (d.state, d.reason) for d in Document.objects.all()}


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "docs"
    write(root, "disk.md", "# Disk\n## Full disk\nRemove rotated logs under /var/log.")
    write(root, "certs/renew.md", "# Certificates\nRenew with certbot every 90 days.")
    write(root, "zh/磁盘.md", "# 磁盘\n磁盘已满时删除旧日志。")
    write(root, "manual.pdf", pdf_bytes([["Backups run nightly at 02:00."], ["Restore drill."]]))
    write(root, "design.docx", docx_bytes(["Queues are drained before deploys."], heading="Design"))
    write(root, ".git/config", "[core]")
    return root


def test_first_sync_creates_the_collection_with_its_readers_and_indexes_every_kind(
    folder, owner, member
):
    out = sync(folder, reader=["olivia", "marco"])
    assert "Created and synced Runbooks" in out and "5 added" in out
    collection = Collection.objects.get(name="Runbooks")
    assert set(collection.readers.values_list("username", flat=True)) == {"olivia", "marco"}
    assert collection.source_path == str(folder.resolve())
    assert {path: state for path, (state, _) in states().items()} == {
        "disk.md": "ready",
        "certs/renew.md": "ready",
        "zh/磁盘.md": "ready",
        "manual.pdf": "ready",
        "design.docx": "ready",
    }
    pdf = Document.objects.get(path="manual.pdf")
    assert [p.page for p in pdf.passages.all()] == [1, 2]
    assert fulltext_search("drained deploys", [collection.pk])
    kinds = list(KnowledgeEvent.objects.values_list("kind", flat=True))
    assert kinds.count(Kind.DOCUMENT_ADDED) == 5 and Kind.CREATED in kinds


def test_a_second_sync_reads_only_what_changed_and_follows_deletions(folder):
    sync(folder)
    before = {d.path: d.indexed_at for d in Document.objects.all()}
    write(folder, "disk.md", "# Disk\n## Full disk\nExpand the volume.")
    (folder / "certs/renew.md").unlink()
    out = sync(folder)
    assert "1 changed" in out and "3 unchanged" in out and "1 removed" in out
    after = {d.path: d.indexed_at for d in Document.objects.all()}
    assert "certs/renew.md" not in after
    assert after["disk.md"] > before["disk.md"]
    assert after["manual.pdf"] == before["manual.pdf"]
    removed = KnowledgeEvent.objects.get(kind=Kind.DOCUMENT_REMOVED)
    assert removed.document_path == "certs/renew.md"
    assert KnowledgeEvent.objects.filter(kind=Kind.DOCUMENT_CHANGED).count() == 1
    collection = Collection.objects.get()
    assert fulltext_search("expand volume", [collection.pk])
    assert not fulltext_search("certbot", [collection.pk])


def test_symlinks_junk_and_broken_files_get_a_reason_and_never_stop_the_sync(folder, tmp_path):
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\nThe root password is hunter2.")
    os.symlink(secret, folder / "link-out.md")
    os.symlink(folder / "disk.md", folder / "link-in.md")
    os.symlink(tmp_path, folder / "linked-folder")
    write(folder, "junk.bin", os.urandom(4096))
    write(folder, "broken.pdf", b"%PDF-1.7\n" + os.urandom(2000))
    write(folder, "empty.md", "   \n")
    out = sync(folder)
    assert "5 added" in out and "6 failed" in out
    found = states()
    assert found["link-out.md"] == ("failed", "a symbolic link out of the folder: never followed")
    assert found["link-in.md"] == ("failed", "a symbolic link inside the folder: never followed")
    assert found["linked-folder"] == ("failed", "a symbolic link: never followed")
    assert found["junk.bin"][0] == "failed" and "no text" in found["junk.bin"][1]
    assert found["broken.pdf"][0] == "failed" and found["broken.pdf"][1]
    assert found["empty.md"] == ("failed", "The file has no text.")
    collection = Collection.objects.get()
    assert not fulltext_search("hunter2", [collection.pk])
    # Nothing changed: nothing is read or audited again.
    last = KnowledgeEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
    assert "0 added, 0 changed, 11 unchanged" in sync(folder)
    later = KnowledgeEvent.objects.filter(pk__gt=last).values_list("kind", flat=True)
    assert sorted(later) == [Kind.SYNC_FINISHED, Kind.SYNC_STARTED]


def test_a_file_too_big_is_refused_with_the_limit(folder, settings):
    settings.KNOWLEDGE_MAX_FILE_BYTES = 2048
    write(folder, "big.md", "# Big\n" + "word " * 1000)
    sync(folder)
    state, reason = states()["big.md"]
    assert state == "failed" and "KNOWLEDGE_MAX_FILE_BYTES" in reason


def test_a_crashed_run_is_resumed_and_a_running_one_refuses_a_second(folder):
    sync(folder)
    collection = Collection.objects.get()
    crashed = SyncRun.objects.create(collection=collection, path=str(folder), trigger="command")
    with pytest.raises(SyncBusy):
        collection_sync(collection=collection, path=folder, trigger="command")
    SyncRun.objects.filter(pk=crashed.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    write(folder, "new.md", "# New\nA page written after the crash.")
    report = collection_sync(collection=collection, path=folder, trigger="command")
    assert report.counts["added"] == 1 and report.counts["unchanged"] == 5
    crashed.refresh_from_db()
    assert crashed.state == "failed" and "interrupted" in crashed.error


def test_a_document_half_indexed_by_a_crash_is_indexed_again(folder):
    sync(folder)
    # A crash between creating the row and indexing it leaves it pending without a hash.
    Document.objects.filter(path="disk.md").update(state="pending", content_hash="")
    report = collection_sync(collection=Collection.objects.get(), path=folder, trigger="command")
    assert report.counts["changed"] == 1
    assert states()["disk.md"][0] == "ready"


def test_every_file_is_stored_before_any_passage_is_embedded(folder, monkeypatch):
    from knowledge import embeddings
    from knowledge.models import Passage

    model = embeddings.embedder()
    real = model._passages
    seen = []  # documents ready and passages stored at each call of the model

    def watched(texts):
        seen.append((Document.objects.filter(state="ready").count(), Passage.objects.count()))
        return real(texts)

    monkeypatch.setattr(model, "_passages", watched)
    model._recent.clear()
    sync(folder)
    ready, stored = Document.objects.filter(state="ready").count(), Passage.objects.count()
    assert ready == 5 and seen and seen[0] == (ready, stored)  # the first call came after all
    assert not Passage.objects.filter(embedding_model="").exists()
    run = SyncRun.objects.get()
    assert run.counts["embedded"] == stored and run.state == "completed"
    indexed = KnowledgeEvent.objects.filter(kind=Kind.DOCUMENT_INDEXED)
    assert sum(e.detail.get("vectors_pending", 0) for e in indexed) == stored


def test_a_model_that_fails_leaves_full_text_and_the_next_sync_embeds(folder, monkeypatch):
    from knowledge import embeddings
    from knowledge.embeddings import EmbeddingsUnavailable
    from knowledge.models import Passage

    model = embeddings.embedder()
    real = model._passages

    def down(texts):
        raise EmbeddingsUnavailable("the embeddings server failed: down")

    monkeypatch.setattr(model, "_passages", down)
    model._recent.clear()
    sync(folder)
    collection = Collection.objects.get()
    assert Passage.objects.filter(embedding_model="").count() == Passage.objects.count() > 0
    assert fulltext_search("rotated logs", [collection.pk])  # searchable all the same
    assert SyncRun.objects.get().state == "completed"

    monkeypatch.setattr(model, "_passages", real)
    out = sync(folder)
    assert "5 unchanged" in out and not Passage.objects.filter(embedding_model="").exists()


def test_a_changed_document_keeps_its_unchanged_passages_vectors_when_the_model_fails(
    monkeypatch,
):
    import hashlib

    from knowledge import embeddings
    from knowledge.embeddings import EmbeddingsUnavailable
    from knowledge.indexing import document_store_text
    from knowledge.models import Passage
    from tests.knowledge.helpers import add_document, runbooks

    document = add_document(runbooks(), "disk.md", "# Disk\n## Full\nRotate logs.\n## Inodes\nOld.")
    model = embeddings.embedder()

    def down(texts):
        raise EmbeddingsUnavailable("the embeddings server failed: down")

    monkeypatch.setattr(model, "_passages", down)
    model._recent.clear()
    text = "# Disk\n## Full\nRotate logs.\n## Inodes\nNew."
    document_store_text(  # an upload: embedded at once, and the model is down
        document=document, text=text, paged=False, media_type="text/markdown", page_count=1,
        content_hash=hashlib.sha256(text.encode()).hexdigest(), size=len(text),
    )  # fmt: skip
    kept = dict(Passage.objects.filter(document=document).values_list("text", "embedding_model"))
    assert kept["Rotate logs."] == model.name and kept["New."] == ""


def test_the_enable_command_obeys_the_readers_rule(folder, owner, member, team_chat):
    sync(folder, reader=["olivia"])
    with pytest.raises(CommandError, match="not every member"):
        call_command("knowledge", "enable", "Runbooks", "--chat", team_chat.chat_key)
    call_command("knowledge", "sync", "Runbooks", str(folder), "--reader", "marco",
                 stdout=StringIO())  # fmt: skip
    out = StringIO()
    call_command("knowledge", "enable", "Runbooks", "--chat", team_chat.chat_key, stdout=out)
    assert "is on in" in out.getvalue()
    assert ChatCollection.objects.filter(chat=team_chat).exists()
    assert ChatMember.objects.filter(chat=team_chat).count() == 2


def test_the_commands_say_what_is_missing(folder, tmp_path):
    with pytest.raises(CommandError, match="no person called 'nobody'"):
        sync(folder, reader=["nobody"])
    with pytest.raises(CommandError, match="is not a folder"):
        sync(tmp_path / "missing")
    assert not Collection.objects.exists()
    with pytest.raises(CommandError, match="no collection"):
        call_command("knowledge", "enable", "Nope", "--chat", "web:x")
