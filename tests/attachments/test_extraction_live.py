"""End to end: files stored here are read by a real Celery worker consuming the files' queue,
as `make run`'s background worker does; a bomb and a file over the reader's memory bound
fail alone, and the same worker goes on to read the next file."""

import json
import time

import pytest
from django.conf import settings

from attachments.models import Attachment
from attachments.services import attachment_store
from attachments.tasks import files_queue
from tests.attachments.documents import docx_bytes, pdf_bytes, zip_bomb_docx
from tests.live import BASE_DIR, BIN, START_BOUND_SECONDS, LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

SETTLE_BOUND_SECONDS = 120  # a bound, not a measure: 2 cores shared with other test runs


@pytest.fixture
def files_worker():
    location = settings.STORAGES["attachments"]["OPTIONS"]["location"]
    stack = LiveStack(
        llm_base_url=None,
        worker_name=f"files-{id(location)}@%h",
        extra_env={
            "ATTACHMENTS_STORAGE_OPTIONS": json.dumps({"location": location}),
            "ATTACHMENTS_EXTRACT_MEMORY_MB": "128",
            "ATTACHMENTS_OCR": "false",  # OCR has its own tests (test_ocr.py)
            # This checkout's code, never another one's installed in the same environment.
            "PYTHONPATH": str(BASE_DIR),
        },
    )
    stack.worker = stack._spawn(
        "worker",
        [
            str(BIN / "celery"),
            "-A",
            "hermes_site",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "-Q",
            files_queue(),
            "-n",
            stack.worker_name,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
    )
    try:
        stack.wait_for_log("worker", "ready", START_BOUND_SECONDS)
        yield stack
    finally:
        stack.stop()


def _settled(attachment_ids: list[int]) -> list[Attachment]:
    deadline = time.monotonic() + SETTLE_BOUND_SECONDS
    while time.monotonic() < deadline:
        found = list(Attachment.objects.filter(pk__in=attachment_ids).order_by("pk"))
        if all(a.state != Attachment.State.PENDING for a in found):
            return found
        time.sleep(0.2)
    raise AssertionError(f"files still pending after {SETTLE_BOUND_SECONDS} s")


def _heavy_docx() -> bytes:
    """A DOCX that packs only a few times (no bomb) but needs more than 128 MB to parse."""
    import io
    import random
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(docx_bytes(["x"])))
    out = io.BytesIO()
    words = random.Random(3)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as heavy:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "word/document.xml":
                head, tail = data.split(b"<w:body>", 1)
                body = b"".join(
                    b"<w:p><w:r><w:t>%08x</w:t></w:r></w:p>" % words.getrandbits(32)
                    for _ in range(400_000)
                )
                data = head + b"<w:body>" + body + tail
            heavy.writestr(item, data)
    return out.getvalue()


def test_the_files_worker_reads_documents_and_survives_bad_ones(files_worker, say):
    message = say("three files")
    bomb = attachment_store(message=message, name="bomb.docx", data=zip_bomb_docx(100))
    heavy = attachment_store(message=message, name="heavy.docx", data=_heavy_docx())
    good = attachment_store(
        message=message, name="runbook.pdf", data=pdf_bytes([["Step 1"], None, ["Step 3"]])
    )
    assert {bomb.state, heavy.state, good.state} == {Attachment.State.PENDING}
    bomb, heavy, good = _settled([bomb.pk, heavy.pk, good.pk])
    assert bomb.state == "failed" and "decompression bomb" in bomb.failure
    assert heavy.state == "failed" and "128 MB of memory" in heavy.failure
    assert (good.state, good.extracted_text, good.page_count) == ("ready", "Step 1\f\fStep 3", 3)
    assert good.note.startswith("Page 2 is a scanned image without a text layer")
    assert files_worker.worker.poll() is None  # the worker lives on
