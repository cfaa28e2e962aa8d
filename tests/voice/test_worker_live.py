"""End to end: recordings stored here are transcribed by a real Celery worker consuming the
voice queue with a threads pool, as `make run`'s background worker does; a file that claims
to be OGG and is not and a recording over the limit fail alone, with their reasons, and the
same worker goes on to transcribe the next one."""

import json
import time

import numpy as np
import pytest
from django.conf import settings

from attachments.models import Attachment
from attachments.services import attachment_store
from tests.live import BASE_DIR, BIN, START_BOUND_SECONDS, LiveStack
from tests.voice.speech import ENGLISH, encode, read_samples, voice_note, word_error_rate
from voice.tasks import voice_queue

pytestmark = pytest.mark.django_db(transaction=True)

SETTLE_BOUND_SECONDS = 240  # a bound, not a measure: 2 cores shared with other test runs


@pytest.fixture
def voice_worker(tmp_path_factory):
    location = settings.STORAGES["attachments"]["OPTIONS"]["location"]
    stack = LiveStack(
        llm_base_url=None,
        worker_name=f"voice-{id(location)}@%h",
        extra_env={
            "ATTACHMENTS_STORAGE_OPTIONS": json.dumps({"location": location}),
            "VOICE_MAX_SECONDS": "20",
            "HERMES_VAR_DIR": str(tmp_path_factory.mktemp("voice-var")),
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
            "threads",
            "--concurrency",
            "2",
            "--loglevel",
            "INFO",
            "-Q",
            voice_queue(),
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


def _settled(ids: list[int]) -> list[Attachment]:
    deadline = time.monotonic() + SETTLE_BOUND_SECONDS
    while time.monotonic() < deadline:
        found = list(Attachment.objects.filter(pk__in=ids).order_by("pk"))
        if all(a.state != Attachment.State.PENDING for a in found):
            return found
        time.sleep(0.5)
    raise AssertionError(f"recordings still pending after {SETTLE_BOUND_SECONDS} s")


def test_the_voice_worker_transcribes_and_survives_bad_recordings(voice_worker, say, tmp_path):
    note = voice_note(tmp_path)
    samples = read_samples(note)
    long = encode(np.concatenate([samples] * 4), tmp_path / "long.ogg")  # about 28 s
    message = say("")
    fake = attachment_store(
        message=message, name="fake.ogg", data=b"OggS" + bytes(range(256)) * 40,
        declared_type="audio/ogg",
    )  # fmt: skip
    too_long = attachment_store(message=message, name="long.ogg", data=long.read_bytes())
    good = attachment_store(message=message, name="voice.ogg", data=note.read_bytes())
    fake, too_long, good = _settled([fake.pk, too_long.pk, good.pk])
    assert fake.state == "failed" and "could not be read as audio" in fake.failure
    assert too_long.state == "failed" and "longer than 20 seconds" in too_long.failure
    assert good.state == "ready", good.failure
    assert word_error_rate(ENGLISH, good.extracted_text) <= 0.25
    assert good.transcript.engine == "local:whisper-base"
    assert voice_worker.worker.poll() is None  # the worker lives on
