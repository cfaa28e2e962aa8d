"""`manage.py export_memory`: Hermes Agent style files per book, approved entries only unless
asked, and names from chat keys or usernames that never leave the export directory."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from chats.services import actor_get_or_create, chat_get_or_create
from memory.models import MemoryEntry
from memory.reviews import memory_review
from memory.services import Author, memory_book, memory_forget, memory_propose
from tests.memory.helpers import shown_revision

pytestmark = pytest.mark.django_db


def add(book, content, *, approve_as=None):
    outcome = memory_propose(book=book, change="add", author=Author(), content=content)
    assert outcome.code == "pending", outcome.message
    if approve_as is not None:
        memory_review(
            entry_id=outcome.entry.pk,
            revision=shown_revision(outcome.entry.pk),
            decision="approve",
            person=approve_as,
        )
    return MemoryEntry.objects.get(pk=outcome.entry.pk)


def export(directory, *args) -> str:
    out = StringIO()
    call_command("export_memory", str(directory), *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


def test_files_per_book_with_entries_separated_by_section_signs(tmp_path, staff, member, team_chat):
    team = memory_book(scope="team")
    add(team, "Deploys happen on Tuesdays.", approve_as=staff)
    add(team, "The VPN is called Ruby.", approve_as=staff)
    add(team, "Still only a proposal.")
    gone = add(team, "Removed later.", approve_as=staff)
    memory_forget(entry_id=gone.pk, person=staff)
    add(memory_book(scope="chat", chat=team_chat), "This room plans the launch.", approve_as=staff)
    marco = memory_book(scope="user", person=member)
    add(marco, "Prefers tea.", approve_as=member)
    add(marco, "Lives in Lisbon.", approve_as=member)
    add(memory_book(scope="user", person=staff), "Only proposed about stella.")

    summary = export(tmp_path)

    assert (tmp_path / "MEMORY.md").read_text() == (
        "Deploys happen on Tuesdays.\n§\nThe VPN is called Ruby.\n"
    )
    assert (tmp_path / "chats" / "web%3Ateam-room" / "MEMORY.md").read_text() == (
        "This room plans the launch.\n"
    )
    assert (tmp_path / "users" / "marco" / "USER.md").read_text() == (
        "Prefers tea.\n§\nLives in Lisbon.\n"
    )
    assert not (tmp_path / "users" / "stella").exists()  # nothing approved about her
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["MEMORY.md", "chats/web%3Ateam-room/MEMORY.md", "users/marco/USER.md"]
    assert "Wrote 3 file(s) with 5 entries" in summary
    assert "users/marco/USER.md: 2 entries" in summary


def test_pending_additions_only_when_asked_and_marked(tmp_path, staff):
    team = memory_book(scope="team")
    add(team, "Deploys happen on Tuesdays.", approve_as=staff)
    add(team, "Still only a proposal.")
    export(tmp_path / "approved")
    assert "proposal" not in (tmp_path / "approved" / "MEMORY.md").read_text()
    export(tmp_path / "all", "--include-pending")
    assert (tmp_path / "all" / "MEMORY.md").read_text() == (
        "Deploys happen on Tuesdays.\n§\n[pending] Still only a proposal.\n"
    )


def test_an_approved_entry_with_a_pending_replacement_exports_its_approved_text(tmp_path, staff):
    team = memory_book(scope="team")
    add(team, "The VPN is called Ruby.", approve_as=staff)
    outcome = memory_propose(
        book=team, change="replace", author=Author(), content="The VPN is Emerald.", match="Ruby"
    )
    assert outcome.code == "pending"
    export(tmp_path, "--include-pending")
    assert (tmp_path / "MEMORY.md").read_text() == "The VPN is called Ruby.\n"


def test_hostile_chat_keys_and_names_stay_inside_the_directory(tmp_path, make_person):
    root = tmp_path / "export"
    hostile_chats = ["../../escape", "/etc/passwd", "..", ".hidden", "a/../../b", "x" * 250]
    for index, chat_id in enumerate(hostile_chats):
        chat, _ = chat_get_or_create(channel="api", chat_id=f"{chat_id}", title=f"c{index}")
        book = memory_book(scope="chat", chat=chat)
        add(book, f"Fact {index}.")
    dots = make_person("..")
    actor = actor_get_or_create(channel="telegram", user_id="../../../tmp/pwn", display_name="Eve")
    for book, text in (
        (memory_book(scope="user", person=dots), "Dots fact."),
        (memory_book(scope="user", actor=actor), "Actor fact."),
    ):
        add(book, text)
    MemoryEntry.objects.update(status="active", pending_change="")

    export(root)

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == len(hostile_chats) + 2
    for path in files:
        assert path.resolve().is_relative_to(root.resolve())
        assert all(len(part) <= 255 for part in path.parts)
    names = {p.parent.name for p in files if p.name == "MEMORY.md"}
    assert len(names) == len(hostile_chats)  # one directory per chat, none shared
    assert (root / "users" / "%2E." / "USER.md").read_text() == "Dots fact.\n"
    actor_files = list((root / "users").glob("telegram%3A*/USER.md"))
    assert [p.read_text() for p in actor_files] == ["Actor fact.\n"]


def test_a_file_in_the_way_is_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CommandError):
        export(blocker)


def test_two_integrations_users_with_one_id_export_to_two_files(tmp_path):
    root = tmp_path / "export"
    for namespace in ("owner:1", "owner:2"):
        actor = actor_get_or_create(
            channel="api", user_id="u1", display_name="U1", namespace=namespace
        )
        add(memory_book(scope="user", actor=actor), f"Fact of {namespace}.")
    MemoryEntry.objects.update(status="active", pending_change="")

    export(root)

    texts = sorted(p.read_text() for p in (root / "users").glob("*/USER.md"))
    assert texts == ["Fact of owner:1.\n", "Fact of owner:2.\n"]
