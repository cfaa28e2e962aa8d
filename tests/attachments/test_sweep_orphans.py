"""Files in attachments' storage that no blob row names (a transaction that rolled back
after its blob was written) are swept, and storing the same bytes again writes the blob's
own name, never a name beside a leftover (attachments/sweeping.py, services.blob_for)."""

import hashlib
import os
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.db import connection, transaction
from django.utils import timezone

from attachments.models import Blob, attachment_storage
from attachments.services import SWEEP_GRACE, attachment_store
from attachments.sweeping import orphan_files_sweep
from attachments.tasks import sweep_blobs

pytestmark = pytest.mark.django_db

LATER = timedelta(hours=2)


class Refused(Exception):
    pass


def _store_then_roll_back(message, data: bytes) -> str:
    """attachment_store inside a transaction that fails afterwards (as a `/v1` request
    refused by a limit on its next file): returns the blob's file name."""
    with pytest.raises(Refused), transaction.atomic():
        stored = attachment_store(message=message, name="report.txt", data=data)
        name = stored.blob.file.name
        raise Refused
    return name


def test_a_blob_file_from_a_rolled_back_transaction_is_swept(say):
    data = b"rolled back\n"
    name = _store_then_roll_back(say(), data)
    storage = attachment_storage()
    assert not Blob.objects.exists()  # no row names it
    assert storage.exists(name)  # the file stayed: what the sweep must find

    assert orphan_files_sweep(grace=SWEEP_GRACE) == 0  # young: perhaps an upload in flight
    assert storage.exists(name)
    assert orphan_files_sweep(grace=SWEEP_GRACE, now=timezone.now() + LATER) == 1
    assert not storage.exists(name)
    assert not Blob.objects.exists()  # the sweep's claim on the key left no row


def test_the_same_bytes_stored_again_take_over_the_leftover_under_their_own_name(say):
    data = b"second try\n"
    left = _store_then_roll_back(say(), data)
    kept = attachment_store(message=say(), name="again.txt", data=data)
    sha256 = hashlib.sha256(data).hexdigest()
    assert kept.blob.file.name == left == f"{sha256[:2]}/{sha256}"
    assert kept.blob.file.open("rb").read() == data
    storage = attachment_storage()
    assert storage.listdir(sha256[:2])[1] == [sha256]  # no second file beside it
    assert orphan_files_sweep(grace=SWEEP_GRACE, now=timezone.now() + LATER) == 0
    assert storage.exists(left)


def test_a_file_beside_a_blob_and_an_orphan_thumbnail_are_swept_the_blob_kept(say):
    data = b"kept\n"
    kept = attachment_store(message=say(), name="kept.txt", data=data)
    storage = attachment_storage()
    beside = storage.save(f"{kept.sha256[:2]}/{kept.sha256}_AbC12x7", ContentFile(data))
    gone = "e" * 64
    thumbnail = storage.save(f"thumbnails/ee/{gone}-320.webp", ContentFile(b"webp"))
    kept_thumbnail = storage.save(
        f"thumbnails/{kept.sha256[:2]}/{kept.sha256}-320.webp", ContentFile(b"webp")
    )
    other = storage.save("notes/readme.txt", ContentFile(b"not a blob's"))

    assert orphan_files_sweep(grace=SWEEP_GRACE, now=timezone.now() + LATER) == 2
    assert not storage.exists(beside)
    assert not storage.exists(thumbnail)
    assert storage.exists(kept.blob.file.name)
    assert storage.exists(kept_thumbnail)
    assert storage.exists(other)  # not in the blobs' layout: never touched
    assert Blob.objects.get().pk == kept.sha256


def test_beats_sweep_task_sweeps_both_rows_and_files(say):
    name = _store_then_roll_back(say(), b"task\n")
    unused = attachment_store(message=say(), name="unused.txt", data=b"unused\n")
    unused.message.delete()
    Blob.objects.update(created_at=timezone.now() - LATER)
    storage = attachment_storage()
    path = storage.path(name)
    old = (timezone.now() - LATER).timestamp()

    os.utime(path, (old, old))
    assert sweep_blobs() == 2
    assert not storage.exists(name)
    assert not Blob.objects.exists()


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.django_db(transaction=True)
def test_the_sweep_never_takes_the_file_of_an_upload_not_yet_committed(say):
    """The upload has written its row and file and not committed; the sweep (told the file is
    old) waits on the row's key, then finds the row: the file is kept."""
    import threading

    message = say()
    data = b"in flight\n"
    sha256 = hashlib.sha256(data).hexdigest()
    written, commit = threading.Event(), threading.Event()

    def upload():
        try:
            with transaction.atomic():
                attachment_store(message=message, name="flight.txt", data=data)
                written.set()
                commit.wait(30)
        finally:
            connection.close()

    swept = []

    def sweep():
        try:
            swept.append(orphan_files_sweep(grace=SWEEP_GRACE, now=timezone.now() + LATER))
        finally:
            connection.close()

    uploader = threading.Thread(target=upload)
    uploader.start()
    assert written.wait(30)
    sweeper = threading.Thread(target=sweep)
    sweeper.start()
    sweeper.join(1)  # it waits on the uncommitted row's key (or has not reached it yet)
    commit.set()
    uploader.join(30)
    sweeper.join(30)
    assert swept == [0]
    blob = Blob.objects.get(pk=sha256)
    assert blob.file.open("rb").read() == data
