"""The SKILL.md format: every bad name, description, path and size is refused with a message
that says what to change; good content parses safely."""

import pytest

from skills.format import (
    BINARY_MAX_BYTES,
    BODY_MAX,
    CATEGORY_DEPTH_MAX,
    DESCRIPTION_MAX,
    FILE_MAX_BYTES,
    MAX_FILES,
    SKILL_MAX_BYTES,
    SkillFormatError,
    check_binary,
    check_category,
    check_file_content,
    check_files,
    is_binary,
    normalise_path,
    parse_skill_md,
)
from tests.skills.helpers import skill_md


def test_a_valid_skill_parses_with_its_optional_fields():
    text = (
        "---\nname: deploy-staging\ndescription: Deploy to staging.\nversion: 1.0\n"
        "license: MIT\ntags: [deploy, ops]\nrelated_skills: [rollback]\n"
        "metadata:\n  hermes:\n    since: 2025-01-02\n---\n# Steps\nDo it.\n"
    )
    parsed = parse_skill_md(text, expected_name="deploy-staging")
    assert parsed.name == "deploy-staging"
    assert parsed.front_matter["version"] == "1.0"
    assert parsed.front_matter["tags"] == ["deploy", "ops"]
    assert parsed.front_matter["metadata"] == {"hermes": {"since": "2025-01-02"}}
    assert parsed.body == "# Steps\nDo it.\n"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("Deploy", "not a valid slug"),
        ("-deploy", "not a valid slug"),
        (".hidden", "not a valid slug"),
        ("deploy staging", "not a valid slug"),
        ("déploiement", "not a valid slug"),
        ("../etc", "not a valid slug"),
        ("a" * 65, "at most 64"),
        ("", "`name` is missing"),
        (42, "`name` is missing"),
    ],
)
def test_bad_names_are_refused(name, says):
    text = (
        f"---\nname: {name!r}\ndescription: x\n---\nbody\n"
        if name != ""
        else ("---\ndescription: x\n---\nbody\n")
    )
    if isinstance(name, int):
        text = "---\nname: 42\ndescription: x\n---\nbody\n"
    with pytest.raises(SkillFormatError, match=says):
        parse_skill_md(text)


def test_the_longest_name_is_accepted():
    name = "a" * 64
    assert parse_skill_md(skill_md(name=name)).name == name


def test_the_name_must_be_the_skills_slug():
    with pytest.raises(SkillFormatError, match="keep `name: deploy-staging`"):
        parse_skill_md(skill_md(name="deploy-prod"), expected_name="deploy-staging")


@pytest.mark.parametrize(
    ("front", "says"),
    [
        ("name: a\n", "`description` is missing"),
        ("name: a\ndescription: ''\n", "`description` is missing"),
        ("name: a\ndescription: [1, 2]\n", "`description` is missing"),
        (f"name: a\ndescription: {'d' * (DESCRIPTION_MAX + 1)}\n", "at most 1,024"),
        ("name: a\ndescription: x\ntags: 5\n", "`tags` must be a list"),
        ("name: a\ndescription: x\nrelated_skills: [Bad Name]\n", "not a valid slug"),
        ("name: a\ndescription: x\nmetadata: text\n", "`metadata` must be a mapping"),
        ("name: a\ndescription: x\nversion: [1]\n", "`version` must be a short string"),
        ("name: a\ndescription: x: y\n", "not valid YAML at line"),
        ("- a\n- b\n", "must be `key: value` lines"),
        ("base: &a [1]\nname: a\ndescription: x\nmore: *a\n", "anchors or aliases"),
        ("name: a\ndescription: !!python/object:os.system x\n", "not valid YAML"),
    ],
)
def test_bad_front_matter_is_refused(front, says):
    with pytest.raises(SkillFormatError, match=says):
        parse_skill_md(f"---\n{front}---\nbody\n")


def test_the_longest_description_is_accepted():
    assert parse_skill_md(skill_md(description="d" * DESCRIPTION_MAX)).description


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "SKILL.md is empty"),
        ("# no front matter\n", "must start with front matter"),
        ("---\nname: a\ndescription: x\n", "not closed"),
        ("--- x\nname: a\n---\nb", "first line of SKILL.md must be exactly"),
        ("---\nname: a\ndescription: x\n---\n\n  \n", "the body is empty"),
        ("---\nname: a\ndescription: x\n---\nbo\x00dy", "NUL"),
        (f"---\nname: a\ndescription: x\n---\n{'b' * (BODY_MAX + 1)}", "at most 100,000"),
        (f"---\nname: a\ndescription: x\nnote: {'n' * 17_000}\n---\nb", "at most 16,384"),
    ],
)
def test_bad_documents_are_refused(text, says):
    with pytest.raises(SkillFormatError, match=says):
        parse_skill_md(text)


def test_the_largest_body_is_accepted():
    assert parse_skill_md(skill_md(body="b" * BODY_MAX))


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("", "`file_path` is missing"),
        ("/etc/passwd", "is absolute"),
        ("~/notes.md", "is absolute"),
        ("C:/x/references/a.md", "is absolute"),
        ("references/../../secret", "leaves the skill"),
        ("references/../SKILL.md", "leaves the skill"),
        ("references\\..\\x.md", "backslash"),
        ("references/a\x00.md", "NUL"),
        ("references/a\u202e.md", "control or invisible"),
        ("references/.env", "hidden segment"),
        ("SKILL.md", "use action `edit` or `patch`"),
        ("nested/SKILL.md", "would make a skill of its own"),
        ("./", "names no file"),
        (f"references/{'x' * 101}", "exceeds 100"),
        ("references/" + "/".join(["abcdefgh"] * 30), "more than 255"),
    ],
)
def test_bad_paths_are_refused(path, says):
    with pytest.raises(SkillFormatError, match=says):
        normalise_path(path)


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("references/api.md", "references/api.md"),
        ("./templates//report.md", "templates/report.md"),
        ("scripts/./deploy.sh", "scripts/deploy.sh"),
        ("assets/cafe\u0301.txt", "assets/caf\u00e9.txt"),
        # The four folders are a convention: root files and other folders are files too.
        ("reference.md", "reference.md"),
        ("LICENSE.txt", "LICENSE.txt"),
        ("examples/deep/er/serve.md", "examples/deep/er/serve.md"),
    ],
)
def test_good_paths_are_normalised(path, normal):
    assert normalise_path(path) == normal


def test_file_sizes_and_binary_content():
    assert check_file_content("assets/a.txt", "x" * FILE_MAX_BYTES)
    with pytest.raises(SkillFormatError, match="at most 1,048,576"):
        check_file_content("assets/a.txt", "x" * (FILE_MAX_BYTES + 1))
    with pytest.raises(SkillFormatError, match="at most 1,048,576"):
        check_file_content("assets/a.txt", "é" * (FILE_MAX_BYTES // 2 + 1))  # bytes, not chars
    with pytest.raises(SkillFormatError, match="not UTF-8 text"):
        check_file_content("assets/a.png", b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(SkillFormatError, match="NUL characters"):
        check_file_content("assets/a.bin", "a\x00b")
    with pytest.raises(SkillFormatError, match="same path"):
        check_files({"references/a.md": "1", "references//a.md": "2"})
    with pytest.raises(SkillFormatError, match=f"at most {MAX_FILES} supporting files"):
        check_files({f"references/{n}.md": "x" for n in range(MAX_FILES + 1)})
    with pytest.raises(SkillFormatError, match=f"at most {MAX_FILES} supporting files"):
        check_files({"a.md": "x"}, dict.fromkeys((f"f/{n}.ttf" for n in range(MAX_FILES)), 1))
    with pytest.raises(SkillFormatError, match="64 MiB"):
        check_files({"a.md": "x"}, {"big.pdf": SKILL_MAX_BYTES})
    with pytest.raises(SkillFormatError, match="same path"):
        check_files({"fonts/a.ttf": "x"}, {"fonts/a.ttf": 3})


def test_binary_files_are_told_apart_and_bounded():
    assert is_binary(b"\x00\x01") and is_binary(b"\xff\xfe") and not is_binary("é".encode())
    assert check_binary("a.pdf", b"%PDF") == b"%PDF"
    with pytest.raises(SkillFormatError, match="16 MiB"):
        check_binary("a.pdf", b"x" * (BINARY_MAX_BYTES + 1))


@pytest.mark.parametrize(
    ("category", "says"),
    [
        ("mlops/inference", None),
        ("ops", None),
        ("", None),
        ("Ops", "not a valid slug"),
        (".curated", "not a valid slug"),
        ("mlops//inference", "empty level"),
        ("/mlops", "empty level"),
        ("/".join(["a"] * (CATEGORY_DEPTH_MAX + 1)), "levels"),
        ("a/" * 130, "characters"),
        ("mlops/../etc", "not a valid slug"),
    ],
)
def test_categories_are_paths_of_slugs(category, says):
    if says is None:
        assert check_category(category) == category
    else:
        with pytest.raises(SkillFormatError, match=says):
            check_category(category)
