"""Side-by-side diffs of skill versions: what a reviewer compares before deciding."""

from skills.diff import MAX_DIFF_CHARS, content_diff, side_by_side, unified_text


def test_changed_lines_pair_up_with_their_numbers_and_unchanged_stretches_are_skipped():
    before = "\n".join(f"line {n}" for n in range(1, 21))
    after = before.replace("line 10", "line ten").replace("line 20", "line 20\nline 21")
    rows, added, removed = side_by_side(before, after, context=1)
    kinds = [row.kind for row in rows]
    assert kinds == ["skip", "equal", "replace", "equal", "skip", "equal", "insert"]
    replace = rows[2]
    assert (replace.left_no, replace.left, replace.right_no, replace.right) == (
        10,
        "line 10",
        10,
        "line ten",
    )
    assert rows[0].skipped == 8 and rows[4].skipped == 8
    assert rows[-1].right == "line 21" and rows[-1].left_no is None
    assert (added, removed) == (2, 1)


def test_a_replacement_of_unequal_length_shows_the_extra_lines_as_inserted_or_deleted():
    rows, added, removed = side_by_side("a\nb\nc", "a\nX\nY\nZ\nc", context=0)
    assert [row.kind for row in rows] == ["skip", "replace", "insert", "insert", "skip"]
    rows, added, removed = side_by_side("a\nb\nc\nd", "a\nX\nd", context=-1)
    assert [row.kind for row in rows] == ["equal", "replace", "delete", "equal"]
    assert (added, removed) == (1, 2)
    # Lines only removed or only added are deleted or inserted, never replaced.
    rows, added, removed = side_by_side("a\nb\nc", "a\nc\nd", context=-1)
    assert [row.kind for row in rows] == ["equal", "delete", "equal", "insert"]
    assert (rows[1].left, rows[1].right_no, rows[3].right, rows[3].left_no) == (
        "b",
        None,
        "d",
        None,
    )


def test_a_new_skill_is_all_added_and_files_are_listed_by_path_after_skill_md():
    diffs = content_diff(
        None, None, "---\nname: x\n---\nbody", {"scripts/b.sh": "b", "assets/a": "a"}
    )
    assert [(diff.path, diff.status) for diff in diffs] == [
        ("SKILL.md", "added"),
        ("assets/a", "added"),
        ("scripts/b.sh", "added"),
    ]
    assert diffs[0].added == 4 and diffs[0].removed == 0


def test_removed_unchanged_and_too_large_files():
    big = "x\n" * (MAX_DIFF_CHARS // 2 + 1)
    diffs = content_diff(
        "same",
        {"references/gone.md": "old", "references/kept.md": "k", "assets/big.txt": "small"},
        "same",
        {"references/kept.md": "k", "assets/big.txt": big},
        include_unchanged=True,
    )
    by_path = {diff.path: diff for diff in diffs}
    assert by_path["SKILL.md"].status == "unchanged" and not by_path["SKILL.md"].rows
    assert by_path["references/gone.md"].status == "removed"
    assert by_path["references/kept.md"].status == "unchanged"
    assert by_path["assets/big.txt"].too_large and not by_path["assets/big.txt"].rows
    assert [diff.path for diff in content_diff("same", {}, "same", {})] == []


def test_unified_text_is_cut_with_a_note():
    before = "\n".join(f"old {n}" for n in range(500))
    after = "\n".join(f"new {n}" for n in range(500))
    text = unified_text(content_diff(before, {}, after, {}), limit=400)
    assert text.startswith("SKILL.md (changed, +500 -500)\n- old 0\n+ new 0")
    assert len(text) < 460 and text.endswith("more characters of diff)")
