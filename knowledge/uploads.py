"""Files and whole folders uploaded into a collection by a maintainer on the dashboard.

The request only stores: each file is copied (bounded: KNOWLEDGE_UPLOAD_MAX_FILES files,
KNOWLEDGE_MAX_FILE_BYTES each, KNOWLEDGE_UPLOAD_MAX_BYTES in all) under the upload's own
folder of VAR_DIR/knowledge-uploads/<run id>/, and a SyncRun (trigger "upload") records it.
Reading and indexing happen on the files' queue (`index_upload`): each file goes through the
same extraction as a folder sync (knowledge.extract, the attachments' child process for
document formats), and every file gets a state and a reason; a failed file never stops the
others. A path already owned by a folder sync or a chat file is left alone (its state says
so in the run's counts as failed). The staged copies are removed when the run ends.
"""

import hashlib
import logging
import posixpath
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from celery import shared_task
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from knowledge.access import may_maintain
from knowledge.jobs import knowledge_job
from knowledge.models import Collection, Document, KnowledgeEvent, SyncRun
from knowledge.services import audit

logger = logging.getLogger(__name__)
INDEX_TASK = "knowledge.uploads.index_upload"
Kind = KnowledgeEvent.Kind
MAX_PATH = 1000


def staging_root() -> Path:
    return Path(settings.VAR_DIR) / "knowledge-uploads"


def clean_path(name: str) -> str:
    """A relative '/'-separated path inside the collection, or ValidationError: no absolute
    path, no `..`, no empty or hidden part."""
    parts = [p for p in (name or "").replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or any(p == ".." or p.startswith(".") for p in parts):
        raise ValidationError(f"{name!r} is not a file path the collection takes.")
    path = posixpath.join(*parts)
    if len(path) > MAX_PATH or any(ord(c) < 32 for c in path):
        raise ValidationError(f"{name[:80]!r} is too long a path.")
    return path


@dataclass
class Staged:
    run: SyncRun
    count: int = 0
    refused: list[str] = field(default_factory=list)


def upload_store(*, collection: Collection, files: list, paths: list[str], by) -> Staged:
    """Stage the uploaded `files` (their collection paths in `paths`, same order; a missing
    path is the file's name) and queue their indexing. PermissionDenied for a non-maintainer,
    ValidationError for too many files or bytes (nothing is stored then)."""
    if not may_maintain(by, collection):
        raise PermissionDenied(f"Only a maintainer of {collection.name} uploads to it.")
    if not files:
        raise ValidationError("Choose at least one file or folder.")
    if len(files) > settings.KNOWLEDGE_UPLOAD_MAX_FILES:
        raise ValidationError(
            f"{len(files):,} files: one upload takes at most "
            f"{settings.KNOWLEDGE_UPLOAD_MAX_FILES:,} (KNOWLEDGE_UPLOAD_MAX_FILES)."
        )
    total = sum(f.size for f in files)
    if total > settings.KNOWLEDGE_UPLOAD_MAX_BYTES:
        raise ValidationError(
            f"{total:,} bytes: one upload takes at most "
            f"{settings.KNOWLEDGE_UPLOAD_MAX_BYTES:,} (KNOWLEDGE_UPLOAD_MAX_BYTES)."
        )
    with transaction.atomic():
        run = SyncRun.objects.create(
            collection=collection, path="(upload)", trigger=SyncRun.Trigger.UPLOAD, by=by
        )
        audit(collection, Kind.SYNC_STARTED, by=by, sync_run=run, files=len(files))
    staged = Staged(run)
    root = staging_root() / str(run.pk)
    manifest = []
    for index, upload in enumerate(files):
        name = paths[index] if index < len(paths) and paths[index] else upload.name
        try:
            path = clean_path(name)
        except ValidationError as exc:
            staged.refused.append(exc.messages[0])
            continue
        target = root / f"{index:06d}"
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
        manifest.append((path, target.name, upload.size))
        staged.count += 1
    (root).mkdir(parents=True, exist_ok=True)
    (root / "manifest.tsv").write_text(
        "".join(f"{name}\t{size}\t{path}\n" for path, name, size in manifest), encoding="utf-8"
    )
    transaction.on_commit(lambda: _enqueue(run.pk))
    return staged


def _enqueue(run_id: int) -> None:
    from attachments.tasks import files_queue

    index_upload.apply_async((run_id,), queue=files_queue())


def _one(collection, run, path: str, staged: Path, size: int, by) -> str:
    from knowledge.indexing import document_index_file

    digest = hashlib.sha256()
    with open(staged, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    content_hash = digest.hexdigest()
    document = Document.objects.filter(collection=collection, path=path).first()
    if document is not None and document.source != Document.Source.UPLOAD:
        return "failed"  # a folder's or a chat file's document: not this upload's to replace
    if document is not None and document.content_hash == content_hash:
        return "unchanged"
    new = document is None
    with transaction.atomic():
        if new:
            document = Document.objects.create(
                collection=collection, path=path, source=Document.Source.UPLOAD
            )
        audit(collection, Kind.DOCUMENT_ADDED if new else Kind.DOCUMENT_CHANGED, by=by,
              document=document, sync_run=run, content_hash=content_hash)  # fmt: skip
    indexed = document_index_file(
        document=document, path=staged, size=size, content_hash=content_hash, sync_run=run, by=by,
        embed_now=False,
    )  # fmt: skip
    if not indexed:
        return "failed"
    return "added" if new else "changed"


@shared_task(bind=True, name=INDEX_TASK, ignore_result=True, max_retries=None)
def index_upload(self, run_id: int) -> dict | None:
    """Read and index an upload's staged files (files' queue), in two passes like a folder
    sync: every file stored, then the passages embedded by `embed_missing`; the run's counts
    and state say how it went. Resumable: a file already indexed with the same hash is unchanged."""
    from knowledge.tasks import embed_missing

    with knowledge_job(self):
        counts = _index_upload(run_id)
    if counts is not None:
        embed_missing.delay()  # the second pass, a batch per task (the job is free again)
    return counts


def _index_upload(run_id: int) -> dict | None:
    run = SyncRun.objects.select_related("collection", "by").filter(pk=run_id).first()
    if run is None or run.state != SyncRun.State.RUNNING:
        return None
    root = staging_root() / str(run.pk)
    counts = {"added": 0, "changed": 0, "unchanged": 0, "removed": 0, "failed": 0}
    error = ""
    try:
        lines = (root / "manifest.tsv").read_text(encoding="utf-8").splitlines()
        for line in lines:
            name, size, path = line.split("\t", 2)
            outcome = _one(run.collection, run, path, root / name, int(size), run.by)
            counts[outcome] += 1
            SyncRun.objects.filter(pk=run.pk).update(counts=counts, heartbeat_at=timezone.now())
    except Exception as exc:  # noqa: BLE001 - the run says it failed; files done stay done
        logger.exception("knowledge: upload %s failed", run.pk)
        error = str(exc)[:2000] or exc.__class__.__name__
    state = SyncRun.State.FAILED if error else SyncRun.State.COMPLETED
    with transaction.atomic():
        SyncRun.objects.filter(pk=run.pk).update(
            state=state, counts=counts, error=error, finished_at=timezone.now()
        )
        audit(run.collection, Kind.SYNC_FINISHED, by=run.by, sync_run=run, state=state, **counts)
    shutil.rmtree(root, ignore_errors=True)
    return counts
