"""The terminal's `/attach PATH`: files staged for the next message, stored on it before its
turn, refused with a reason when missing, unreadable or too big."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attachments.models import Attachment
from attachments.terminal import STAGED, attach_answer, staged_files_store
from chats.models import Chat, Message
from chats.slash_commands import CommandContext, slash_command, slash_commands
from tests.attachments.conftest import png_bytes
from tests.fakes import openai_server as fake_openai
from tests.live import database_url_for_subprocesses

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def run_terminal(fake_llm, blobs: Path, typed: str, **env) -> subprocess.CompletedProcess:
    """`manage.py chat --profile files` in a real process, `typed` on its stdin."""
    fake_llm.default = fake_openai.echo("you said: ")
    result = subprocess.run(
        [sys.executable, "manage.py", "chat", "--profile", "files"],
        input=typed,
        capture_output=True,
        text=True,
        cwd=BASE_DIR,
        env={
            **os.environ,
            "DATABASE_URL": database_url_for_subprocesses(),
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": fake_llm.base_url,
            "LLM_MODEL": "fake-model",
            "ATTACHMENTS_STORAGE_OPTIONS": json.dumps({"location": str(blobs)}),
            **env,
        },
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.django_db(transaction=True)
def test_attach_stages_files_for_the_next_message_only(fake_llm, tmp_path):
    shot = tmp_path / "screen shot.png"
    shot.write_bytes(png_bytes(4, 4))
    notes = tmp_path / "说明.txt"
    notes.write_text("steps to reproduce\n", encoding="utf-8")
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 5000)
    blobs = tmp_path / "blobs"
    typed = "\n".join(
        [
            "/attach",
            f"/attach {shot}",  # a name with a space, typed bare
            f'/attach "{notes}"',
            f"/attach {tmp_path / 'missing.pdf'}",
            f"/attach {tmp_path}",
            f"/attach {big}",
            "/attach",
            "what is wrong here?",
            "and now?",
            "/quit",
            "",
        ]
    )
    # No worker reads the text file here: its hold ends at the (short) bound
    # (tests/attachments/test_turn_holds_channels.py has the worker and the wait).
    result = run_terminal(
        fake_llm, blobs, typed, ATTACHMENTS_MAX_FILE_BYTES="4096", ATTACHMENTS_TURN_WAIT_SECONDS="1"
    )
    out = result.stdout
    assert "Nothing is staged." in out
    assert "Staged screen shot.png" in out and "Staged 说明.txt" in out
    assert f"Not staged: {tmp_path / 'missing.pdf'} does not exist." in out
    assert f"Not staged: {tmp_path} is not a file." in out
    assert "Not staged: big.bin is 4.9 KB; a file may have at most 4.0 KB." in out
    assert "Staged for your next message (2):\n• screen shot.png" in out
    assert "Attached screen shot.png" in out and "image/png" in out
    assert "you said: what is wrong here?" in out

    chat = Chat.objects.get(chat_key="cli:files")
    first, second = Message.objects.filter(chat=chat, role="user").order_by("id")
    stored = list(first.attachments.order_by("id"))
    assert [(a.name, a.media_type) for a in stored] == [
        ("screen shot.png", "image/png"),
        ("说明.txt", "text/plain"),
    ]
    # The terminal process wrote the blob to its own storage folder.
    assert (blobs / stored[0].blob.file.name).read_bytes() == shot.read_bytes()
    assert not second.attachments.exists()  # staged files go with one message, then unstage


def _context(session):
    return CommandContext(channel="cli", chat=None, actor=None, person=None, session=session)


def _with(context, args):
    return CommandContext(**{**context.__dict__, "args": args})


def test_clear_unstages_and_a_limit_on_the_count(tmp_path, settings):
    settings.ATTACHMENTS_MAX_PER_MESSAGE = 1
    one = tmp_path / "one.txt"
    one.write_text("1")
    context = _context({})
    assert attach_answer(_with(context, str(one))).startswith("Staged one.txt")
    assert "at most 1 files" in attach_answer(_with(context, str(one)))
    assert attach_answer(_with(context, "--clear")) == "Unstaged 1 file(s)."
    assert context.session[STAGED] == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_not_staged(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("no")
    secret.chmod(0)
    answer = attach_answer(_with(_context({}), str(secret)))
    assert answer == f"Not staged: {secret} cannot be read (permission denied)."


@pytest.mark.django_db
def test_a_file_gone_before_the_message_is_reported_and_the_message_kept(tmp_path, say):
    gone = tmp_path / "gone.txt"
    gone.write_text("soon gone")
    session = {}
    attach_answer(_with(_context(session), str(gone)))
    gone.unlink()
    message = say("here it was")
    assert staged_files_store(message, session) == [
        "Not attached: gone.txt cannot be read now (No such file or directory)."
    ]
    assert not Attachment.objects.exists() and Message.objects.filter(pk=message.pk).exists()


def test_attach_is_a_terminal_command_only():
    assert slash_command("attach", "cli") is not None
    assert slash_command("attach", "telegram") is None
    assert "attach" not in [c.name for c in slash_commands("telegram")]
    no_session = CommandContext(channel="web", chat=None, actor=None, person=None, args="x")
    assert "for the terminal" in attach_answer(no_session)


@pytest.mark.heavy
@pytest.mark.django_db(transaction=True)
def test_attach_an_audio_file_is_transcribed_before_the_turn(fake_llm, tmp_path):
    """`/attach` of a voice recording (OGG/Opus, espeak-ng's speech): stored as audio,
    transcribed in the terminal's process by the hub's engine, and the agent hears it."""
    from tests.attachments.audio import speech_ogg_opus

    voice = tmp_path / "voice note.ogg"
    voice.write_bytes(speech_ogg_opus("please water the plants on friday"))
    typed = "\n".join([f"/attach {voice}", "what did I say?", "/quit", ""])
    out = run_terminal(fake_llm, tmp_path / "blobs", typed, STT_BASE_URL="").stdout
    assert "Attached voice note.ogg" in out and "audio/ogg" in out
    assert "Transcribed automatically:" in out
    attachment = Attachment.objects.get()
    assert attachment.kind == "audio" and attachment.state == Attachment.State.READY
    heard = attachment.extracted_text.lower()
    assert "plants" in heard and "friday" in heard, heard
    # The model was asked with the transcript beside the typed words.
    asked = fake_openai.last_user_text(fake_llm.last_request).lower()
    assert "what did i say?" in asked and "plants" in asked
