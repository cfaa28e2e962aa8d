"""Side-by-side diffs of skill content: two versions, or a proposal against its base.

Pages (the skill page, the approvals page) and Telegram show what changed from these rows;
the text is shown as is (templates reveal hidden code points), never interpreted. Lines are
compared with the standard library's `difflib`; a file too large to compare line by line in
a page's time budget is reported as changed with its sizes instead of a diff.
"""

import difflib
from dataclasses import dataclass, field

from skills.format import SKILL_FILE

MAX_DIFF_CHARS = 200_000  # per side; beyond, only the sizes are shown


@dataclass(frozen=True)
class Row:
    """One row of a side-by-side diff. `kind` is equal, replace, delete, insert, or skip
    (`skipped` unchanged lines left out between two hunks)."""

    kind: str
    left_no: int | None = None
    left: str = ""
    right_no: int | None = None
    right: str = ""
    skipped: int = 0


@dataclass
class FileDiff:
    """The diff of one path: SKILL.md or a supporting file."""

    path: str
    status: str  # added, removed, changed, unchanged
    rows: list[Row] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    too_large: bool = False
    left_size: int = 0
    right_size: int = 0

    @property
    def changed(self) -> bool:
        return self.status != "unchanged"


def side_by_side(before: str, after: str, *, context: int = 3) -> tuple[list[Row], int, int]:
    """Rows of the diff from `before` to `after` with `context` unchanged lines around each
    change (a negative context keeps every line), and the counts of added and removed lines."""
    left, right = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(a=left, b=right, autojunk=False)
    groups = [matcher.get_opcodes()] if context < 0 else list(matcher.get_grouped_opcodes(context))
    rows: list[Row] = []
    added = removed = 0
    shown_to = 0  # lines of `left` accounted for, to report skipped stretches
    for group in groups:
        first = group[0]
        if first[1] > shown_to:
            rows.append(Row("skip", skipped=first[1] - shown_to))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for offset in range(i2 - i1):
                    rows.append(
                        Row(
                            "equal",
                            i1 + offset + 1,
                            left[i1 + offset],
                            j1 + offset + 1,
                            right[j1 + offset],
                        )
                    )
                continue
            removed += i2 - i1
            added += j2 - j1
            for offset in range(max(i2 - i1, j2 - j1)):
                i, j = i1 + offset, j1 + offset
                has_left, has_right = i < i2, j < j2
                # A replacement of unequal length ends in lines deleted or inserted alone.
                kind = "replace" if has_left and has_right else "delete" if has_left else "insert"
                rows.append(
                    Row(
                        kind,
                        i + 1 if has_left else None,
                        left[i] if has_left else "",
                        j + 1 if has_right else None,
                        right[j] if has_right else "",
                    )
                )
        shown_to = group[-1][2]
    if groups and shown_to < len(left):
        rows.append(Row("skip", skipped=len(left) - shown_to))
    return rows, added, removed


def file_diff(path: str, before: str | None, after: str | None, *, context: int = 3) -> FileDiff:
    """The diff of one path; None stands for a file absent on that side."""
    if before is None and after is None:
        raise ValueError("a file must exist on at least one side")
    status = (
        "added"
        if before is None
        else "removed"
        if after is None
        else "unchanged"
        if before == after
        else "changed"
    )
    result = FileDiff(
        path=path,
        status=status,
        left_size=len(before or ""),
        right_size=len(after or ""),
    )
    if status == "unchanged":
        return result
    if max(result.left_size, result.right_size) > MAX_DIFF_CHARS:
        result.too_large = True
        return result
    result.rows, result.added, result.removed = side_by_side(
        before or "", after or "", context=context
    )
    return result


def content_diff(
    before_md: str | None,
    before_files: dict | None,
    after_md: str,
    after_files: dict,
    *,
    context: int = 3,
    include_unchanged: bool = False,
) -> list[FileDiff]:
    """SKILL.md first, then every supporting file by path. `before_md` None means there was
    no earlier version (a new skill): everything is added."""
    before_files = before_files or {}
    diffs = [file_diff(SKILL_FILE, before_md, after_md, context=context)]
    for path in sorted(set(before_files) | set(after_files)):
        diffs.append(
            file_diff(path, before_files.get(path), after_files.get(path), context=context)
        )
    return [diff for diff in diffs if include_unchanged or diff.changed]


def unified_text(diffs: list[FileDiff], *, limit: int = 3000) -> str:
    """A compact unified-style text of the diffs (for Telegram and terminals), cut to
    `limit` characters with a note of what was left out."""
    out: list[str] = []
    for diff in diffs:
        if not diff.changed:
            continue
        out.append(f"{diff.path} ({diff.status}, +{diff.added} -{diff.removed})")
        if diff.too_large:
            out.append(f"  too large to show: {diff.left_size} -> {diff.right_size} characters")
            continue
        for row in diff.rows:
            if row.kind == "skip":
                out.append(f"  … {row.skipped} unchanged lines")
            elif row.kind == "equal":
                out.append(f"  {row.right}")
            else:
                if row.left_no is not None:
                    out.append(f"- {row.left}")
                if row.right_no is not None:
                    out.append(f"+ {row.right}")
    text = "\n".join(out)
    if len(text) > limit:
        cut = text[:limit].rsplit("\n", 1)[0]
        text = f"{cut}\n… ({len(text) - len(cut)} more characters of diff)"
    return text
