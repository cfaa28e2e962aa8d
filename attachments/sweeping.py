"""The sweep of files in attachments' storage that no blob row names.

A blob's file is written inside the transaction that creates its row (services.blob_for):
when that transaction rolls back afterwards (a `/v1` request refused by a limit while its
files were being stored, a worker killed mid-upload, a database error), the row is gone and
the file stays. `blobs_sweep` only knows rows; this walks the storage itself
(`<2 hex>/<sha256>` files and `thumbnails/<2 hex>/<sha256>-<side>.webp`) and deletes, once
older than SWEEP_GRACE, each file no row names.

The race with an upload of the same bytes is closed on the row's primary key: the sweep
claims a blob file by inserting the row itself, in a transaction it rolls back after
deleting the file. An upload's uncommitted row makes that insert wait and then fail (the
file is the upload's: kept); the sweep's uncommitted claim makes the upload's insert wait
until the file is gone, and the upload then writes it anew."""

import logging
import re
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from attachments.models import Blob, attachment_storage

logger = logging.getLogger(__name__)

_PREFIX = re.compile(r"[0-9a-f]{2}")
# A blob's own name, or one a storage made up beside it (`<sha256>_AbC12x7`, by the code
# before blob_for wrote under the row's name only).
_BLOB_FILE = re.compile(r"(?P<sha256>[0-9a-f]{64})(?:_[A-Za-z0-9]+)?")
_THUMBNAIL_FILE = re.compile(r"(?P<sha256>[0-9a-f]{64})-\d+\.webp")
THUMBNAILS = "thumbnails"


def _listdir(storage, path: str) -> tuple[list[str], list[str]]:
    try:
        return storage.listdir(path)
    except FileNotFoundError:
        return [], []


def _stored_files(storage):
    """(name, sha256, is_thumbnail) for each file of the blobs' and thumbnails' layout."""
    folders, _ = _listdir(storage, "")
    for folder in sorted(folders):
        if _PREFIX.fullmatch(folder):
            for file in _listdir(storage, folder)[1]:
                found = _BLOB_FILE.fullmatch(file)
                if found and found["sha256"].startswith(folder):
                    yield f"{folder}/{file}", found["sha256"], False
    if THUMBNAILS in folders:
        for folder in sorted(_listdir(storage, THUMBNAILS)[0]):
            if _PREFIX.fullmatch(folder):
                for file in _listdir(storage, f"{THUMBNAILS}/{folder}")[1]:
                    found = _THUMBNAIL_FILE.fullmatch(file)
                    if found and found["sha256"].startswith(folder):
                        yield f"{THUMBNAILS}/{folder}/{file}", found["sha256"], True


def _older_than(storage, name: str, cutoff: datetime) -> bool:
    try:
        return storage.get_modified_time(name) < cutoff
    except (FileNotFoundError, NotImplementedError):
        return False  # gone already, or a storage that cannot tell: kept


def _claimed_and_deleted(storage, name: str, sha256: str) -> bool:
    """Delete the blob file `name` if no row names it, under the claim on its key."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                Blob.objects.create(sha256=sha256, size=0, file=name)  # the claim
        except IntegrityError:
            # A row has this hash: the file is garbage only if the row names another file.
            blob = Blob.objects.select_for_update().filter(sha256=sha256).first()
            if blob is None or blob.file.name == name:
                return False
            storage.delete(name)
            return True
        storage.delete(name)
        transaction.set_rollback(True)  # the claim was only a lock
    return True


def orphan_files_sweep(*, grace, now=None, limit: int = 1000) -> int:
    """Delete up to `limit` files of attachments' storage that no blob row names and that
    are older than `grace`; returns how many."""
    storage = attachment_storage()
    cutoff = (now or timezone.now()) - grace
    deleted = 0
    for name, sha256, is_thumbnail in _stored_files(storage):
        if deleted >= limit:
            break
        if not _older_than(storage, name, cutoff):
            continue
        try:
            if is_thumbnail:
                if Blob.objects.filter(sha256=sha256).exists():
                    continue
                storage.delete(name)  # made again from its blob should it come back
            elif not _claimed_and_deleted(storage, name, sha256):
                continue
        except Exception:  # noqa: BLE001 - a storage error leaves the file for the next run
            logger.exception("could not sweep the file %s", name)
            continue
        logger.info("swept %s: no blob names it", name)
        deleted += 1
    return deleted
