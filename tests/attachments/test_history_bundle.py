"""History exports carry the messages' files: `export_chat --bundle` writes the lines and
each blob once by SHA-256 (a folder, or a tar archive), `import_chat` stores them again, and
an export of the import is the same, byte for byte. A bundle cannot smuggle bytes under
another content's name, and a plain JSON Lines export still imports, its files marked as
missing."""

import hashlib
import io
import json
import tarfile

import pytest
from django.core.management import CommandError, call_command

from attachments.history import MISSING_BYTES
from attachments.models import Attachment, Blob
from attachments.services import SWEEP_GRACE, attachment_store, blobs_sweep
from chats.models import Actor, Chat

pytestmark = pytest.mark.django_db

CHINESE_NAME = "季度报告 2026.txt"


def run(command: str, *args) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def history(say, png):
    """Three messages: a photo, the same photo again with a text file, and none."""
    first = say("the screenshot")
    attachment_store(message=first, name="screen.png", data=png, declared_type="image/png")
    second = say("again, with the notes")
    attachment_store(message=second, name="copy.png", data=png)
    notes = attachment_store(message=second, name=CHINESE_NAME, data="部署在周五\n".encode())
    Attachment.objects.filter(pk=notes.pk).update(extracted_text="部署在周五", page_count=1)
    attachment_store(message=say("and an empty one"), name="empty.txt", data=b"")
    say("no files here")
    return png


def wipe():
    """Delete every chat (their files go with them) and sweep the blobs, as a new hub."""
    Chat.objects.all().delete()
    Actor.objects.all().delete()
    blobs_sweep(now=Blob.objects.latest("created_at").created_at + 2 * SWEEP_GRACE)
    assert not Attachment.objects.exists() and not Blob.objects.exists()


def files_in(path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_a_folder_round_trip_is_byte_identical(history, tmp_path):
    png = history
    run("export_chat", "--all", "--bundle", str(tmp_path / "first"))
    first = files_in(tmp_path / "first")
    # One blob per content: the photo on two messages is there once; the empty file has none.
    assert sorted(first) == sorted(
        ["history.jsonl"]
        + [
            f"blobs/{h[:2]}/{h}"
            for h in {
                hashlib.sha256(png).hexdigest(),
                hashlib.sha256("部署在周五\n".encode()).hexdigest(),
            }
        ]
    )
    records = [json.loads(line) for line in first["history.jsonl"].decode().splitlines()]
    assert [len(r.get("attachments", [])) for r in records] == [1, 2, 1, 0]
    assert "attachments" not in records[3]  # a record without files is as it always was
    assert records[1]["attachments"][1]["name"] == CHINESE_NAME

    wipe()
    assert run("import_chat", str(tmp_path / "first")).startswith("4 new, 0 duplicates")
    restored = Attachment.objects.get(name=CHINESE_NAME)
    assert restored.blob.file.open("rb").read() == "部署在周五\n".encode()
    assert (restored.extracted_text, restored.page_count) == ("部署在周五", 1)
    assert Attachment.objects.get(name="empty.txt").failure == "The file is empty (0 bytes)."
    assert Blob.objects.count() == 2

    run("export_chat", "--all", "--bundle", str(tmp_path / "second"))
    assert files_in(tmp_path / "second") == first
    # Importing again changes nothing: the messages are there already.
    assert run("import_chat", str(tmp_path / "second")).startswith("0 new, 4 duplicates")
    assert Attachment.objects.count() == 4


def test_a_tar_archive_round_trip_is_byte_identical(history, tmp_path):
    run("export_chat", "--all", "--bundle", str(tmp_path / "history.tar"))
    with tarfile.open(tmp_path / "history.tar") as archive:
        names = archive.getnames()
        lines = archive.extractfile("history.jsonl").read()
    assert names[-1] == "history.jsonl" and len(names) == 3
    wipe()
    run("import_chat", str(tmp_path / "history.tar"))
    run("export_chat", "--all", "--bundle", str(tmp_path / "again.tar"))
    with tarfile.open(tmp_path / "again.tar") as archive:
        assert archive.extractfile("history.jsonl").read() == lines
        assert archive.getnames() == names


def test_a_blob_that_does_not_match_its_name_is_refused(history, tmp_path):
    run("export_chat", "--all", "--bundle", str(tmp_path / "b"))
    blob = next((tmp_path / "b" / "blobs").rglob("*"))
    while blob.is_dir():
        blob = next(blob.iterdir())
    blob.write_bytes(b"<html><script>alert(1)</script>")  # another content, same name
    wipe()
    err = io.StringIO()
    call_command("import_chat", str(tmp_path / "b"), stdout=io.StringIO(), stderr=err)
    assert "does not match its SHA-256" in err.getvalue()
    assert not Blob.objects.filter(sha256=blob.name).exists()


def test_plain_lines_import_with_their_files_marked_missing(history, tmp_path):
    run("export_chat", "--all", "-o", str(tmp_path / "plain.jsonl"))
    wipe()
    run("import_chat", str(tmp_path / "plain.jsonl"))
    photo = Attachment.objects.get(name="screen.png")
    assert (photo.state, photo.failure, photo.blob) == ("failed", MISSING_BYTES, None)
    assert photo.size == len(history)  # the facts are kept


def test_a_bad_files_entry_is_a_bad_line(history, tmp_path):
    run("export_chat", "--all", "--bundle", str(tmp_path / "b"))
    path = tmp_path / "b" / "history.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0]["attachments"][0]["sha256"] = "../../etc/passwd"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    wipe()
    with pytest.raises(CommandError):
        call_command(
            "import_chat",
            str(tmp_path / "b"),
            "--strict",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    assert not Attachment.objects.exists()


def test_the_bundle_must_be_new(history, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(CommandError, match="exists and is not an empty folder"):
        run("export_chat", "--all", "--bundle", str(tmp_path / "full"))
