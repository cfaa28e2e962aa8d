"""A folder (or a git working tree) on the server into a collection: incremental by content
hash, deletions followed, every change audited, resumable.

- Each regular file under the folder becomes a Document at its relative path. A file whose
  sha256 did not change is not read again. The bytes hashed are the bytes read (copied to a
  private temporary file first), so a file that changes during the sync is indexed as one
  consistent version, and the next sync sees the newer one.
- Symbolic links are never followed (files or folders, pointing out of the folder or not):
  each gets a failed document saying so. Hidden entries (`.git`, `.cache`…) are skipped.
- Binary junk, files too big and files that fail to extract get state `failed` and the
  reason; they never stop the sync.
- Two passes: every file's passages are stored first (full-text search finds them at once),
  then the collection's passages without a vector are embedded, a batch at a time: in the
  run itself for the operator's command, by the task `embed_missing` after a run on the
  worker. The offline model embeds a few passages a second, so a first sync of thousands of
  files would otherwise leave most of them unsearchable for hours; unchanged passages keep
  their vectors.
- A run records its progress (SyncRun.counts, heartbeat). A crashed run (its heartbeat
  older than KNOWLEDGE_SYNC_STALE_SECONDS) is marked failed by the next run, which resumes
  by the hashes: what was indexed stays indexed. Deletions are only followed by a run that
  walked the whole folder.
"""

import hashlib
import logging
import os
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from knowledge.indexing import document_index_file, document_mark_failed, passages_embed_missing
from knowledge.jobs import EMBED_ROUND
from knowledge.models import Collection, Document, KnowledgeEvent, SyncRun
from knowledge.services import audit

logger = logging.getLogger(__name__)
Kind = KnowledgeEvent.Kind
HEARTBEAT_EVERY = 25  # files


class SyncBusy(Exception):
    """Another sync of the collection is running (its heartbeat is fresh)."""


@dataclass
class SyncReport:
    run_id: int
    counts: dict = field(default_factory=dict)


def _hash_copy(source: Path, target: Path, limit: int) -> tuple[str, int]:
    """Copy at most `limit` + 1 bytes of `source` (opened without following a link) to
    `target`; (sha256 of the whole file, its size)."""
    digest = hashlib.sha256()
    size = 0
    fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as file, open(target, "wb") as out:
        while chunk := file.read(1024 * 1024):
            digest.update(chunk)
            if size <= limit:
                out.write(chunk[: max(0, limit + 1 - size)])
            size += len(chunk)
    return digest.hexdigest(), size


def _walk(root: Path):
    """(relative path, absolute path, why it is not read or "") for every entry under
    `root`, in a stable order; never following a link."""
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(folder)
        dirnames.sort()
        kept = []
        for name in dirnames:
            if name.startswith("."):
                continue
            path = base / name
            if path.is_symlink():
                yield path.relative_to(root).as_posix(), path, "a symbolic link: never followed"
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = base / name
            relative = path.relative_to(root).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                target = os.path.realpath(path)
                where = "inside" if Path(target).is_relative_to(root) else "out of"
                yield relative, path, f"a symbolic link {where} the folder: never followed"
            elif not stat.S_ISREG(mode):
                yield relative, path, "not a regular file"
            else:
                yield relative, path, ""


def _start(collection: Collection, path: str, trigger: str, by) -> SyncRun:
    stale = timezone.now() - timedelta(seconds=settings.KNOWLEDGE_SYNC_STALE_SECONDS)
    with transaction.atomic():
        Collection.objects.select_for_update().get(pk=collection.pk)
        running = SyncRun.objects.filter(collection=collection, state=SyncRun.State.RUNNING)
        if running.filter(heartbeat_at__gte=stale).exists():
            raise SyncBusy(f"A sync of {collection.name} is running.")
        for crashed in running:
            SyncRun.objects.filter(pk=crashed.pk).update(
                state=SyncRun.State.FAILED,
                error="interrupted (no heartbeat): the next run resumed it",
                finished_at=timezone.now(),
            )
            audit(collection, Kind.SYNC_FINISHED, sync_run=crashed, state="interrupted")
        run = SyncRun.objects.create(collection=collection, path=path, trigger=trigger, by=by)
        audit(collection, Kind.SYNC_STARTED, by=by, sync_run=run, path=path, trigger=trigger)
    return run


def collection_sync(
    *, collection: Collection, path: str | os.PathLike, trigger: str, by=None, embed: bool = True
) -> SyncReport:
    """Bring `collection` in line with the folder at `path` (the rules of this module).
    With `embed` the second pass (the vectors) runs here, as the operator's command wants;
    without, the caller leaves it to the task `embed_missing` (knowledge.tasks), so that a
    worker thread is never held for hours. Raises SyncBusy when another run holds it,
    FileNotFoundError when `path` is no folder."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder")
    run = _start(collection, str(root), trigger, by)
    counts = dict.fromkeys(("added", "changed", "unchanged", "removed", "failed"), 0)
    known = {
        d.path: d
        for d in Document.objects.filter(collection=collection).only("id", "path", "source")
    }
    hashes = dict(
        Document.objects.filter(collection=collection).values_list("path", "content_hash")
    )
    seen: set[str] = set()
    limit = settings.KNOWLEDGE_MAX_FILE_BYTES
    try:
        with tempfile.TemporaryDirectory(prefix="hub-knowledge-") as scratch:
            copy = Path(scratch) / "file"
            for number, (relative, absolute, refusal) in enumerate(_walk(root), start=1):
                if len(relative) > 1000:
                    continue
                seen.add(relative)
                outcome = _one(
                    collection, run, known, hashes, relative, absolute, refusal, copy, limit, by
                )
                counts[outcome] += 1
                if number % HEARTBEAT_EVERY == 0:
                    SyncRun.objects.filter(pk=run.pk).update(
                        counts=counts, heartbeat_at=timezone.now()
                    )
            for relative, document in known.items():
                if relative in seen or document.source != Document.Source.FOLDER:
                    continue
                with transaction.atomic():
                    audit(collection, Kind.DOCUMENT_REMOVED, by=by, sync_run=run,
                          document_path=relative)  # fmt: skip
                    document.delete()
                    Collection.objects.filter(pk=collection.pk).update(updated_at=timezone.now())
                counts["removed"] += 1
        if embed:
            embed_stored(collection, run, counts)
    except Exception as exc:
        SyncRun.objects.filter(pk=run.pk).update(
            state=SyncRun.State.FAILED, counts=counts, error=repr(exc)[:2000],
            finished_at=timezone.now(),
        )  # fmt: skip
        raise
    with transaction.atomic():
        SyncRun.objects.filter(pk=run.pk).update(
            state=SyncRun.State.COMPLETED, counts=counts, finished_at=timezone.now(),
            heartbeat_at=timezone.now(),
        )  # fmt: skip
        Collection.objects.filter(pk=collection.pk).update(
            source_path=collection.source_path or str(root), updated_at=timezone.now()
        )
        audit(collection, Kind.SYNC_FINISHED, by=by, sync_run=run, state="completed", **counts)
    return SyncReport(run.pk, counts)


def embed_stored(collection: Collection, run: SyncRun, counts: dict) -> None:
    """The second pass: embed the collection's passages that have no vector yet, a batch at
    a time with a heartbeat after each (the offline model makes a few passages a second: a
    big first sync embeds for hours, and must not look crashed). Stops when none is left or
    the model fails (the next sync, periodic or not, or the task `embed_missing` resumes).
    Each round that embeds leaves fewer passages waiting (`passages_embed_missing` embeds
    nothing rather than vectors under another model's name), so the loop ends."""
    counts.setdefault("embedded", 0)
    while done := passages_embed_missing(limit=EMBED_ROUND, collection_ids=[collection.pk]):
        counts["embedded"] += done
        SyncRun.objects.filter(pk=run.pk).update(counts=counts, heartbeat_at=timezone.now())


def _one(collection, run, known, hashes, relative, absolute, refusal, copy, limit, by) -> str:
    """Sync one entry; never raises for a bad file. Returns the count it adds to."""
    document = known.get(relative)
    if document is not None and document.source != Document.Source.FOLDER:
        return "unchanged"  # an upload at the same path: the folder does not own it
    content_hash, size = "", 0
    if not refusal:
        try:
            content_hash, size = _hash_copy(absolute, copy, limit)
        except OSError as exc:
            refusal = f"could not be read: {exc.strerror or exc}"
    if document is not None and content_hash and hashes.get(relative) == content_hash:
        return "unchanged"
    if document is not None and refusal and hashes.get(relative) == "" and not content_hash:
        existing = Document.objects.filter(pk=document.pk).values_list("reason", flat=True)
        if existing.first() == refusal:
            return "unchanged"
    new = document is None
    if new:
        with transaction.atomic():
            document = Document.objects.create(
                collection=collection, path=relative, source=Document.Source.FOLDER
            )
            audit(collection, Kind.DOCUMENT_ADDED, by=by, document=document, sync_run=run)
        known[relative] = document
    elif content_hash:
        audit(collection, Kind.DOCUMENT_CHANGED, by=by, document=document, sync_run=run,
              content_hash=content_hash)  # fmt: skip
    if refusal:
        document_mark_failed(document=document, reason=refusal, content_hash="", size=0,
                             sync_run=run, by=by)  # fmt: skip
        return "failed"
    indexed = document_index_file(
        document=document, path=copy, size=size, content_hash=content_hash, sync_run=run, by=by,
        embed_now=False,
    )  # fmt: skip
    if not indexed:
        return "failed"
    return "added" if new else "changed"


def collection_for_sync(*, name: str, path: str, by=None, readers=()) -> tuple[Collection, bool]:
    """The collection called `name`, created (fed by `path`, with `readers`) if there is none."""
    from knowledge.services import collection_create

    existing = Collection.objects.filter(name=name).first()
    if existing is not None:
        return existing, False
    return collection_create(name=name, by=by, readers=readers, source_path=path), True
