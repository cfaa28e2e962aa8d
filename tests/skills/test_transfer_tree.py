"""Skills from the wild (issue 20, class 1): a skill folder is a folder, at any depth.

A Hermes-style checkout (three levels, hidden tier folders, skills nested in skills, files
outside the four conventional folders, binary fonts and PDFs) imports whole, and export then
import gives identical skills, content hashes and bytes. Links are never followed (issue 19
item 8), and export paths stay unambiguous when a category runs through a skill's folder.
"""

import hashlib
import io
import os

import pytest
from django.core.management import CommandError, call_command

from chats.agent.registry import TurnContext
from chats.services import message_ingest
from skills.models import Skill, SkillBlob, SkillEvent, SkillVersion, Via
from skills.services import Author, skill_create, skill_file_write, skill_import
from skills.tools import _list
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db

# Generated, not copied: a TrueType-like header and a PDF-like document with a NUL and bytes
# that are not UTF-8, so both count as binary.
FONT = b"\x00\x01\x00\x00\x00\x0c\x00\x80\x00\x03\x00\x40OS/2" + bytes(range(256)) * 4
PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n" + b"\xff\x00" * 64


def run(command, *args):
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write(path, content: str | bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))


def snapshot():
    return sorted(
        (
            s.slug,
            s.category,
            s.current_version.skill_md,
            s.current_version.files,
            s.current_version.binaries,
            s.current_version.content_hash,
        )
        for s in Skill.objects.select_related("current_version")
    )


def wipe():
    SkillEvent.objects.all().delete()
    Skill.objects.update(current_version=None)
    SkillVersion.objects.all().delete()
    Skill.objects.all().delete()


def hermes_tree(root):
    """Three levels, hidden tiers, a nested skill, root files, examples/, a font, a PDF."""
    pdf = root / ".curated/pdf"
    write(pdf / "SKILL.md", skill_md(name="pdf", description="Fill and read PDF forms."))
    write(pdf / "reference.md", "# Reference\n\nSee forms.md.\n")
    write(pdf / "forms.md", "# Forms\n")
    write(pdf / "LICENSE.txt", "Licensed under the Apache License 2.0.\n")
    write(pdf / "scripts/fill_form.py", "print('fill')\n")
    write(pdf / "assets/sample.pdf", PDF)
    write(pdf / ".gitkeep", "")
    write(root / ".system/installer/SKILL.md", skill_md(name="installer", description="Install."))
    vllm = root / "mlops/inference/vllm"
    write(vllm / "SKILL.md", skill_md(name="vllm", description="Serve models with vLLM."))
    write(vllm / "examples/serve.md", "vllm serve model\n")
    canvas = root / "design/canvas"
    write(canvas / "SKILL.md", skill_md(name="canvas", description="Design posters."))
    write(canvas / "canvas-fonts/Mono-Regular.ttf", FONT)
    write(canvas / "canvas-fonts/OFL.txt", "SIL Open Font License 1.1\n")
    write(canvas / "themes/core/dark.json", '{"bg": "#000"}\n')
    agent = root / "agents/hermes-agent"
    write(agent / "SKILL.md", skill_md(name="hermes-agent", description="Run Hermes."))
    write(agent / "references/cli.md", "hermes --help\n")
    write(agent / "self-restart/SKILL.md", skill_md(name="self-restart", description="Restart."))
    write(agent / "self-restart/references/railway.md", "railway restart\n")
    write(root / "README.md", "A collection of skills.\n")  # outside every skill


@pytest.mark.storage
def test_a_hermes_style_tree_imports_whole_and_round_trips_with_its_binaries(tmp_path):
    root = tmp_path / "checkout"
    hermes_tree(root)

    out, err = run("import_skills", str(root))
    assert "6 applied" in out
    skills = {s.slug: s for s in Skill.objects.select_related("current_version")}
    assert {slug: s.category for slug, s in skills.items()} == {
        "pdf": "",
        "installer": "",
        "vllm": "mlops/inference",
        "canvas": "design",
        "hermes-agent": "agents",
        "self-restart": "agents/hermes-agent",
    }
    pdf = skills["pdf"].current_version
    assert pdf.files == {
        "LICENSE.txt": "Licensed under the Apache License 2.0.\n",
        "forms.md": "# Forms\n",
        "reference.md": "# Reference\n\nSee forms.md.\n",
        "scripts/fill_form.py": "print('fill')\n",
    }
    assert pdf.binaries == {"assets/sample.pdf": hashlib.sha256(PDF).hexdigest()}
    assert ".gitkeep: skipped, a hidden file" in out + err
    assert skills["vllm"].current_version.files == {"examples/serve.md": "vllm serve model\n"}
    canvas = skills["canvas"].current_version
    assert set(canvas.files) == {"canvas-fonts/OFL.txt", "themes/core/dark.json"}
    assert set(canvas.binaries) == {"canvas-fonts/Mono-Regular.ttf"}
    # A skill inside a skill is its own skill; its files are not the outer one's.
    assert skills["hermes-agent"].current_version.files == {"references/cli.md": "hermes --help\n"}
    assert skills["self-restart"].current_version.files == {
        "references/railway.md": "railway restart\n"
    }
    assert SkillBlob.objects.count() == 2
    # Each skill says where it came from.
    assert skills["vllm"].origin["path"] == "mlops/inference/vllm"
    assert skills["vllm"].origin["root"] == str(root.resolve())

    before = snapshot()
    run("export_skills", str(tmp_path / "out"))
    assert (tmp_path / "out/design/canvas/canvas-fonts/Mono-Regular.ttf").read_bytes() == FONT
    assert (tmp_path / "out/pdf/assets/sample.pdf").read_bytes() == PDF
    wipe()
    out, _ = run("import_skills", str(tmp_path / "out"))
    assert "6 applied" in out
    assert snapshot() == before


def test_a_changed_binary_changes_the_hash_and_makes_a_new_version(tmp_path):
    root = tmp_path / "checkout"
    hermes_tree(root)
    run("import_skills", str(root))
    first = Skill.objects.get(slug="canvas").current_version
    write(root / "design/canvas/canvas-fonts/Mono-Regular.ttf", FONT + b"\x01")
    out, _ = run("import_skills", str(root))
    assert "1 applied" in out and "5 unchanged" in out
    second = Skill.objects.get(slug="canvas").current_version
    assert second.number == 2 and second.content_hash != first.content_hash


def test_text_only_hashes_stay_as_they_were():
    from skills.format import content_hash

    # The hash a text-only version had before binaries existed (the key is added only when
    # there are binaries), so stored hashes stay valid.
    assert content_hash("a", {"b": "c"}) == content_hash("a", {"b": "c"}, {})
    assert content_hash("a", {"b": "c"}) != content_hash("a", {"b": "c"}, {"d": "0" * 64})


def test_categories_are_paths_and_skills_list_matches_a_prefix(tmp_path):
    root = tmp_path / "checkout"
    hermes_tree(root)
    run("import_skills", str(root))
    message = message_ingest(
        channel="telegram", chat_id="7", user_id="7", user_name="Ann", text="hi", chat_kind="dm"
    ).message
    context = TurnContext(chat=message.chat, trigger=message, actor=message.actor)
    listed = _list(context, {"category": "mlops"})
    assert "vllm [mlops/inference]" in listed
    assert "vllm" in _list(context, {"category": "mlops/inference"})
    assert _list(context, {"category": "mlops/inf"}) == "No skills match."
    assert "self-restart" in _list(context, {"category": "agents"})


def test_a_symlinked_skill_md_is_refused_and_never_read(tmp_path):
    outside = tmp_path / "outside.md"
    write(outside, skill_md(name="leak", description="Read from outside the pack."))
    root = tmp_path / "pack"
    (root / "leak").mkdir(parents=True)
    os.symlink(outside, root / "leak/SKILL.md")
    write(root / "good/SKILL.md", skill_md(name="good"))
    os.symlink(tmp_path / "elsewhere", root / "linked-folder")
    write(root / "good/references/a.md", "a\n")
    os.symlink(outside, root / "good/references/b.md")

    with pytest.raises(CommandError, match="1 refused"):
        out, err = run("import_skills", str(root))
    assert list(Skill.objects.values_list("slug", flat=True)) == ["good"]
    assert Skill.objects.get(slug="good").current_version.files == {"references/a.md": "a\n"}


def test_symlinks_are_reported(tmp_path):
    outside = tmp_path / "outside.md"
    write(outside, "secret\n")
    root = tmp_path / "pack"
    write(root / "good/SKILL.md", skill_md(name="good"))
    os.symlink(outside, root / "good/references-link.md")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "linked-folder")
    out, err = run("import_skills", str(root))
    text = out + err
    assert "good/references-link.md: skipped, a symbolic link" in text
    assert "linked-folder: skipped, a symbolic link" in text


def test_export_keeps_a_skill_whose_folder_would_fall_inside_another_skills_files(
    tmp_path, reviewer_author
):
    # `ops` has a file under scripts/; `scripts` lives in category `ops`, and `deploy` in
    # category `ops/scripts`: written naively, both would land inside ops's folder (issue 19
    # item 8: re-import then lost a skill).
    skill_create(name="ops", content=skill_md(name="ops"), author=reviewer_author)
    skill_file_write(
        name="ops", file_path="scripts/deploy/notes.md", file_content="n\n", author=reviewer_author
    )
    skill_create(
        name="scripts", content=skill_md(name="scripts"), author=reviewer_author, category="ops"
    )
    skill_create(
        name="deploy",
        content=skill_md(name="deploy"),
        author=reviewer_author,
        category="ops/scripts",
    )
    before = snapshot()
    out, _ = run("export_skills", str(tmp_path / "out"))
    assert "3 skills exported" in out
    wipe()
    out, _ = run("import_skills", str(tmp_path / "out"))
    assert "3 applied" in out
    assert snapshot() == before


def test_a_file_named_skill_md_inside_a_skill_is_refused(dm_author, skill):
    outcome = skill_file_write(
        name="deploy-staging",
        file_path="references/SKILL.md",
        file_content="x\n",
        author=dm_author,
    )
    assert outcome.code == "invalid" and "SKILL.md" in outcome.message


def test_import_refuses_a_skill_over_the_limits_with_a_clear_line(tmp_path, monkeypatch):
    from skills import format as skill_format

    root = tmp_path / "pack"
    write(root / "big/SKILL.md", skill_md(name="big"))
    write(root / "big/assets/blob.bin", b"\xff" * (skill_format.BINARY_MAX_BYTES + 1))
    write(root / "small/SKILL.md", skill_md(name="small"))
    monkeypatch.setattr("skills.transfer.SKILL_MAX_BYTES", 1000)  # not 64 MiB of test files
    for n in range(3):  # each within the per-file limit, together over the skill's
        write(root / f"huge/assets/part-{n}.bin", b"\xff" * 400)
    write(root / "huge/SKILL.md", skill_md(name="huge"))
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="2 refused"):
        call_command("import_skills", str(root), stdout=out, stderr=err)
    assert "big: refused (invalid) — Error: assets/blob.bin: 16,777,217 bytes" in err.getvalue()
    assert "huge: refused (invalid) — Error: its files have more than 1,000 bytes" in (
        err.getvalue()
    )
    assert list(Skill.objects.values_list("slug", flat=True)) == ["small"]
    outcome = skill_import(
        name="many",
        content=skill_md(name="many"),
        files={f"n/{i}.md": "x" for i in range(skill_format.MAX_FILES + 1)},
        category="",
        author=Author(via=Via.COMMAND),
    )
    assert outcome.code == "invalid" and f"at most {skill_format.MAX_FILES}" in outcome.message


def test_the_agents_changes_keep_remove_or_replace_binaries(
    tmp_path, reviewer_author, staff_reviewer
):
    from skills.reviews import skill_rollback
    from skills.services import skill_file_remove, skill_patch

    root = tmp_path / "checkout"
    hermes_tree(root)
    run("import_skills", str(root))
    font = "canvas-fonts/Mono-Regular.ttf"
    first = Skill.objects.get(slug="canvas").current_version

    patched = skill_patch(
        name="canvas", old_string="make image", new_string="make poster", author=reviewer_author
    )
    assert patched.code == "applied", patched.message
    assert patched.version.binaries == first.binaries  # a text change keeps the font

    removed = skill_file_remove(name="canvas", file_path=font, author=reviewer_author)
    assert removed.code == "applied" and removed.version.binaries == {}
    assert removed.version.content_hash != patched.version.content_hash

    skill_rollback(name="canvas", to_number=1, shown_version=3, person=staff_reviewer)
    rolled = Skill.objects.get(slug="canvas").current_version
    assert rolled.binaries == first.binaries and rolled.content_hash == first.content_hash

    replaced = skill_file_write(
        name="canvas", file_path=font, file_content="now a text file\n", author=reviewer_author
    )
    assert replaced.code == "applied"
    assert font in replaced.version.files and font not in replaced.version.binaries
