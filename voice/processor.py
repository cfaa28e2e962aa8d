"""The voice processor of the attachments' registry: which files it transcribes, and
transcribing one (run by `voice.tasks.transcribe_attachment` on the voice queue).

The blob is copied to a temporary file and read by the child (`voice.child`), bounded by
VOICE_TRANSCRIBE_SECONDS and VOICE_MEMORY_MB: decoded, refused past VOICE_MAX_SECONDS, split
on silence into parts, transcribed part by part (progress on the `Transcript`). With
STT_BASE_URL set the child only splits, and the parts go to that server; when it fails (or a
money cap refuses a paid server) the local engine transcribes instead. The words become the
attachment's `extracted_text`; a failure is `ProcessingFailed` with a person's reason, and
the recording is kept either way.
"""

import logging
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from attachments.processing import Derived, ProcessingFailed
from voice import accounting, remote
from voice.engine_files import ENGINE_NAME
from voice.models import Transcript
from voice.runner import TooLong, TranscriptionFailed, run_child
from voice.signals import transcript_progress

logger = logging.getLogger(__name__)

PROCESSOR_NAME = "voice"
LOCAL_ENGINE = f"local:{ENGINE_NAME}"
NO_SOUND = ("The file has no sound track.", "No speech was heard in this recording.")


def wants_recording(attachment) -> bool:
    """Audio and video (the kind sniffed from the bytes), and a file whose sender said it is
    audio although its bytes say otherwise (so it gets a clear failure, not silence); no I/O."""
    if not settings.VOICE_ENABLED:
        return False
    declared = (attachment.declared_type or "").lower()
    return attachment.kind in ("audio", "video") or (
        declared.startswith("audio/") and attachment.kind == "other"
    )


def _progress(transcript: Transcript, **fields) -> None:
    for name, value in fields.items():
        setattr(transcript, name, value)
    transcript.updated_at = timezone.now()
    Transcript.objects.filter(pk=transcript.pk).update(**fields, updated_at=transcript.updated_at)
    transcript_progress.send(sender=Transcript, transcript=transcript)


def _on_event(transcript: Transcript):
    def handle(event: dict) -> None:
        if event.get("event") == "decoded":
            _progress(
                transcript,
                duration_seconds=float(event["seconds"]),
                parts_total=int(event["parts"]),
                parts_done=0,
            )
        elif event.get("event") == "part":
            _progress(transcript, parts_done=int(event["done"]))

    return handle


def _request(path: Path, mode: str, out_dir: str = "") -> dict:
    return {
        "path": str(path),
        "mode": mode,
        "max_seconds": settings.VOICE_MAX_SECONDS,
        "threads": settings.VOICE_CPU_THREADS,
        "language": settings.VOICE_LANGUAGE,
        "model_cache": str(settings.VOICE_MODEL_CACHE),
        "model_dir": settings.VOICE_MODEL_DIR,
        "out_dir": out_dir,
    }


def _child(request: dict, transcript: Transcript) -> dict:
    return run_child(
        request,
        seconds=settings.VOICE_TRANSCRIBE_SECONDS,
        memory_mb=settings.VOICE_MEMORY_MB,
        on_event=_on_event(transcript),
    )


def _remote(path: Path, folder: str, transcript: Transcript, attachment) -> dict | None:
    """The remote server's transcript, or None when it is not to be used or failed (the
    local engine then transcribes). Raises TranscriptionFailed for the file's own faults."""
    parts_dir = Path(folder) / "parts"
    parts_dir.mkdir()
    answer = _child(_request(path, "split", str(parts_dir)), transcript)
    refusal = accounting.paid_refusal(attachment, answer["seconds"])
    if refusal:
        logger.info("remote transcription of %s skipped: %s", attachment.pk, refusal)
        return None
    try:
        words = remote.transcribe_parts(
            answer["files"],
            on_part=lambda done, total: _progress(transcript, parts_done=done, parts_total=total),
        )
    except remote.RemoteFailed as exc:
        logger.warning("STT server failed on attachment %s (%s): local engine", attachment.pk, exc)
        return None
    return answer | words | {"engine": remote.engine_name()}


def transcribe(attachment) -> Derived:
    """The transcript of one stored recording (processing.py's `run`)."""
    if attachment.blob is None:
        raise ProcessingFailed("The recording's bytes are missing.")
    transcript, _ = Transcript.objects.update_or_create(
        attachment=attachment,
        defaults={"parts_done": 0, "parts_total": 0, "updated_at": timezone.now()},
    )
    transcript_progress.send(sender=Transcript, transcript=transcript)
    video = attachment.kind == "video"
    with tempfile.TemporaryDirectory(prefix="hub-voice-") as folder:
        path = Path(folder) / "recording"
        with attachment.blob.file.open("rb") as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target, 1024 * 1024)
        try:
            answer = None
            if settings.STT_BASE_URL:
                answer = _remote(path, folder, transcript, attachment)
            if answer is None:
                answer = _child(_request(path, "local"), transcript) | {"engine": LOCAL_ENGINE}
        except TooLong as exc:
            raise ProcessingFailed(str(exc)) from exc
        except TranscriptionFailed as exc:
            if video and str(exc) in NO_SOUND:
                return Derived(note=f"Its sound track was not transcribed: {exc}")
            if str(exc) == NO_SOUND[0] and not video:
                raise ProcessingFailed(
                    "The file could not be read as audio: it has no sound in it."
                ) from exc
            raise ProcessingFailed(str(exc)) from exc
    seconds = float(answer["seconds"])
    _progress(
        transcript,
        language=(answer.get("language") or "")[:16],
        duration_seconds=seconds,
        engine=answer["engine"][:64],
        parts_done=transcript.parts_total or transcript.parts_done,
    )
    accounting.record(attachment, engine=answer["engine"], seconds=seconds)
    notes = []
    languages = answer.get("languages") or []
    if len(languages) > 1:
        notes.append(f"Speech in more than one language was heard ({', '.join(languages)}).")
    if answer.get("clipped"):
        notes.append("The recording is clipped (too loud): words may be misheard.")
    return Derived(extracted_text=answer["text"], note=" ".join(notes) or None)
