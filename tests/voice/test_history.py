"""Export and import keep a recording whole: its bytes (in the bundle), its transcript's
words (`extracted_text`) and the transcript's facts (language, duration, engine, parts);
an export of the import is the same, byte for byte."""

import io

import pytest
from django.core.management import call_command

from attachments.models import Attachment, Blob
from attachments.services import SWEEP_GRACE, attachment_store, blobs_sweep
from chats.models import Actor, Chat
from tests.voice.speech import voice_note
from voice.models import Transcript
from voice.tasks import transcribe_attachment

pytestmark = pytest.mark.django_db(transaction=True)


def run(command: str, *args) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def files_in(path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_a_voice_note_and_its_transcript_survive_export_and_import(say, tmp_path, monkeypatch):
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda name, args: None)
    data = voice_note(tmp_path).read_bytes()
    message = say("")
    attachment_store(message=message, name="notes.txt", data=b"first file\n")
    voice = attachment_store(message=message, name="voice.ogg", data=data)
    assert transcribe_attachment(voice.pk) == "ready"
    voice.refresh_from_db()
    words, facts = (
        voice.extracted_text,
        Transcript.objects.values(
            "language", "duration_seconds", "engine", "parts_done", "parts_total"
        ).get(),
    )
    run("export_chat", "--all", "--bundle", str(tmp_path / "first"))
    Chat.objects.all().delete()
    Actor.objects.all().delete()
    blobs_sweep(now=Blob.objects.latest("created_at").created_at + 2 * SWEEP_GRACE)
    assert not Transcript.objects.exists()
    run("import_chat", str(tmp_path / "first"))
    restored = Attachment.objects.get(name="voice.ogg")
    assert restored.state == "ready" and restored.extracted_text == words
    with restored.blob.file.open("rb") as stream:
        assert stream.read() == data
    assert (
        Transcript.objects.filter(attachment=restored)
        .values("language", "duration_seconds", "engine", "parts_done", "parts_total")
        .get()
        == facts
    )
    run("export_chat", "--all", "--bundle", str(tmp_path / "second"))
    assert files_in(tmp_path / "first") == files_in(tmp_path / "second")
