"""Side-by-side diffs of skill versions: what a reviewer compares before deciding."""

import random
import uuid
from types import SimpleNamespace

from skills import diff as diff_module
from skills.diff import (
    MAX_DIFF_CHARS,
    MAX_DIFF_ROWS,
    content_diff,
    content_diff_cached,
    side_by_side,
    unified_text,
)


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


def _lines(count: int, seed: int) -> str:
    """`count` one-letter lines from a two-letter alphabet: the worst case of an alignment
    (every line matches half of the other side's)."""
    pick = random.Random(seed)
    return "\n".join(pick.choice("ab") for _ in range(count))


def test_a_pathological_pair_at_the_size_limit_falls_back_with_the_lines_changed():
    before, after = _lines(MAX_DIFF_CHARS // 2, 1), _lines(MAX_DIFF_CHARS // 2, 2)
    assert len(before) < MAX_DIFF_CHARS and len(after) < MAX_DIFF_CHARS
    [diff] = content_diff(before, {}, after, {})
    assert diff.too_large and not diff.rows
    assert diff.summary.startswith("Too large to diff here: up to ")
    assert "lines changed (199,999 → 199,999 characters)" in diff.summary
    assert "Too large to diff here" in unified_text([diff])


def test_a_diff_with_more_rows_than_a_page_shows_falls_back_with_exact_counts():
    before = "\n".join(f"old {n}" for n in range(MAX_DIFF_ROWS + 1))
    after = "\n".join(f"new {n}" for n in range(MAX_DIFF_ROWS + 1))
    [diff] = content_diff(before, {}, after, {})
    assert diff.too_large and diff.exact and diff.changed_lines == 2 * (MAX_DIFF_ROWS + 1)
    assert diff.summary.startswith(f"Too large to diff here: {2 * (MAX_DIFF_ROWS + 1):,} lines")


def test_the_files_of_a_skill_at_its_limits_share_one_budget():
    """64 files, each pathological: the work stops at the budget, the rest show sizes."""
    size = MAX_DIFF_CHARS // 2 - 1
    left, right = _lines(size // 2, 1), _lines(size // 2, 2)
    before = {f"references/f{n:02}.md": left for n in range(64)}
    after = {f"references/f{n:02}.md": right for n in range(64)}
    diffs = content_diff("same", before, "same", after)
    assert len(diffs) == 64 and all(diff.too_large and not diff.rows for diff in diffs)
    counted = [diff for diff in diffs if diff.changed_lines is not None]
    assert 0 < len(counted) < 64  # counted while the budget lasted, then sizes only
    assert diffs[-1].summary == "Too large to diff here (99,997 → 99,997 characters)."


def test_only_the_changed_middle_is_aligned_so_a_small_change_in_a_long_file_is_shown():
    before = "\n".join(f"step {n}" for n in range(15_000))
    after = before.replace("step 7000\n", "step seven thousand\n")
    [diff] = content_diff(before, {}, after, {})
    assert not diff.too_large and (diff.added, diff.removed) == (1, 1)
    assert [row.kind for row in diff.rows] == [
        "skip",
        *["equal"] * 3,
        "replace",
        *["equal"] * 3,
        "skip",
    ]


def test_the_same_pair_of_contents_is_computed_once(monkeypatch):
    calls = []
    real = diff_module.content_diff
    monkeypatch.setattr(
        diff_module, "content_diff", lambda *a, **k: calls.append(a) or real(*a, **k)
    )
    token = uuid.uuid4().hex  # contents no earlier test cached
    base = SimpleNamespace(skill_md=f"a\n{token}\n", files={}, content_hash="")
    proposal = SimpleNamespace(skill_md=f"b\n{token}\n", files={}, content_hash="")
    first = content_diff_cached(before=base, after=proposal)
    second = content_diff_cached(before=base, after=proposal)
    assert len(calls) == 1 and first == second and first[0].added == 1
    content_diff_cached(before=None, after=proposal)  # another pair: computed
    assert len(calls) == 2
