"""An imported skill's files on its page (issue 20, class 1): every file listed with its size
and kind, binaries never inline, downloadable as attachments by whoever may read the skill."""

import io

import pytest
from django.core.management import call_command

from tests.chats.dashboard_helpers import login
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n<script>alert(1)</script>\n" + b"\xff\x00" * 32


@pytest.fixture
def imported(tmp_path):
    """`pdf` imported from a folder: SKILL.md, a text file at its root and a binary PDF."""
    folder = tmp_path / "pack/docs/pdf"
    (folder / "assets").mkdir(parents=True)
    (folder / "SKILL.md").write_text(skill_md(name="pdf", description="Read PDFs."))
    (folder / "reference.md").write_text("# Reference\n")
    (folder / "assets/sample.pdf").write_bytes(PDF)
    call_command("import_skills", str(tmp_path / "pack"), stdout=io.StringIO())


def test_the_page_lists_every_file_with_size_and_kind_and_never_shows_a_binary(imported, member):
    page = login(member).get("/skills/pdf/").content.decode()
    files = page[page.index('id="skill-files"') : page.index('id="skill-versions"')]
    assert "<code>reference.md</code>" in files and "text" in files
    assert "<code>assets/sample.pdf</code>" in files
    assert f"{len(PDF)}\xa0bytes" in files and "binary" in files and "application/pdf" in files
    assert "/skills/pdf/file?version=1&amp;path=assets/sample.pdf" in files
    assert "%PDF" not in page and "alert(1)" not in page


def test_a_binary_downloads_as_an_attachment_exactly_as_imported(imported, member):
    response = login(member).get("/skills/pdf/file", {"path": "assets/sample.pdf"})
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == PDF
    assert response["Content-Disposition"] == 'attachment; filename="sample.pdf"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Type"] == "application/pdf"


def test_downloads_follow_the_pages_rule(client, imported, outsider):
    anonymous = client.get("/skills/pdf/file", {"path": "assets/sample.pdf"})
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
    as_outsider = login(outsider)
    page_status = as_outsider.get("/skills/pdf/").status_code
    download = as_outsider.get("/skills/pdf/file", {"path": "assets/sample.pdf"})
    assert download.status_code == page_status  # skills are team-wide: whoever reads it


@pytest.mark.parametrize(
    "path", ["reference.md", "assets/missing.pdf", "../../etc/passwd", "SKILL.md", ""]
)
def test_only_a_binary_of_that_version_downloads(imported, member, path):
    response = login(member).get("/skills/pdf/file", {"path": path})
    assert response.status_code == 404
    assert login(member).get(
        "/skills/pdf/file", {"path": "assets/sample.pdf", "version": 2}
    ).status_code == (404)


def test_skill_view_lists_binaries_and_does_not_return_their_bytes(imported):
    from chats.agent.registry import TurnContext
    from chats.services import message_ingest
    from skills.tools import _view

    message = message_ingest(
        channel="telegram", chat_id="7", user_id="7", user_name="Ann", text="hi", chat_kind="dm"
    ).message
    context = TurnContext(chat=message.chat, trigger=message, actor=message.actor)
    listing = _view(context, {"name": "pdf"})
    assert f"- assets/sample.pdf (binary, application/pdf, {len(PDF):,} bytes)" in listing
    assert "- reference.md (" in listing
    answer = _view(context, {"name": "pdf", "path": "assets/sample.pdf"})
    assert answer.startswith("Error: assets/sample.pdf is a binary file")
    assert "%PDF" not in answer
