"""Side-by-side diffs of skill content: two versions, or a proposal against its base.

Pages (the skill page, the approvals page) and Telegram show what changed from these rows;
the text is shown as is (templates reveal hidden code points), never interpreted.

The work is bounded whatever the content, because a person triggers it by opening a page:
lines shared at the start and the end are set aside first (linear), only the changed middle
is aligned (a longest common subsequence of lines, rapidfuzz's bit-parallel `Indel`), and
one content diff (all its files) spends at most MAX_DIFF_WORK_CHARS characters read,
MAX_DIFF_CELLS lines × lines aligned and MAX_DIFF_ROWS rows. A file over MAX_DIFF_CHARS, or
one that would pass what is left, is reported as "too large to diff here: N lines changed"
(or with its sizes only) instead.
`content_diff_cached` computes each pair of stored contents once and keeps it in the cache
under their content hashes, so a page or a notice never recomputes it.
"""

import logging
from dataclasses import dataclass, field

from django.core.cache import cache
from rapidfuzz.distance import Indel

from skills.format import SKILL_FILE, content_hash

logger = logging.getLogger(__name__)

MAX_DIFF_CHARS = 200_000  # per side and file; beyond, only the sizes and line counts
# What one content diff (a skill's SKILL.md and files together) may spend; a file that
# would pass what is left shows its fallback, so the work of a page is bounded by these.
MAX_DIFF_CELLS = 50_000_000  # changed lines × changed lines aligned (~6 MB of bits at most)
MAX_DIFF_ROWS = 3_000  # rows shown
MAX_DIFF_WORK_CHARS = 2_000_000  # characters read (both sides), to split and compare lines
CACHE_SECONDS = 7 * 24 * 3600
CACHE_FORMAT = 1  # bump when FileDiff or the rows change shape: old entries are ignored


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
    too_large: bool = False  # no rows: see `summary`
    left_size: int = 0
    right_size: int = 0
    changed_lines: int | None = None  # with too_large: lines changed (at most, unless
    exact: bool = False  # `exact`), or None when not even counted (only sizes are known)

    @property
    def changed(self) -> bool:
        return self.status != "unchanged"

    @property
    def summary(self) -> str:
        """The fallback of a diff too large to show, in words."""
        sizes = f"{self.left_size:,} → {self.right_size:,} characters"
        if self.changed_lines is None:
            return f"Too large to diff here ({sizes})."
        lines = f"{'' if self.exact else 'up to '}{self.changed_lines:,} lines changed"
        return f"Too large to diff here: {lines} ({sizes})."


@dataclass
class Budget:
    """What is left to spend on one content diff, shared by its files."""

    cells: int = MAX_DIFF_CELLS
    rows: int = MAX_DIFF_ROWS
    chars: int = MAX_DIFF_WORK_CHARS


class DiffTooLarge(Exception):
    """The diff would take more work or rows than allowed; `changed` lines differ (an upper
    bound unless `exact`)."""

    def __init__(self, changed: int, *, exact: bool = False):
        super().__init__(f"{changed} lines changed")
        self.changed, self.exact = changed, exact


def _trimmed(left: list[str], right: list[str]) -> tuple[int, int]:
    """How many lines `left` and `right` share at the start, and then at the end."""
    shortest = min(len(left), len(right))
    prefix = 0
    while prefix < shortest and left[prefix] == right[prefix]:
        prefix += 1
    suffix = 0
    while suffix < shortest - prefix and left[-1 - suffix] == right[-1 - suffix]:
        suffix += 1
    return prefix, suffix


def _opcodes(left: list[str], right: list[str], budget: Budget) -> list[tuple]:
    """(tag, i1, i2, j1, j2) spans from `left` to `right` as difflib names them (equal,
    replace, delete, insert); DiffTooLarge when aligning the changed middle would pass
    `budget.cells` (which it spends otherwise)."""
    prefix, suffix = _trimmed(left, right)
    middle_left = left[prefix : len(left) - suffix]
    middle_right = right[prefix : len(right) - suffix]
    codes = []
    if prefix:
        codes.append(("equal", 0, prefix, 0, prefix))
    if middle_left and middle_right:
        cells = len(middle_left) * len(middle_right)
        if cells > budget.cells:
            raise DiffTooLarge(len(middle_left) + len(middle_right))
        budget.cells -= cells
        # Lines as small integers: the alignment compares numbers, never long strings.
        ids: dict[str, int] = {}
        a = [ids.setdefault(line, len(ids)) for line in middle_left]
        b = [ids.setdefault(line, len(ids)) for line in middle_right]
        pending = None  # a run of deletes and inserts between two equal stretches
        for op in Indel.opcodes(a, b):
            span = (op.src_start + prefix, op.src_end + prefix)
            span += (op.dest_start + prefix, op.dest_end + prefix)
            if op.tag == "equal":
                if pending:
                    codes.append(_changed(*pending))
                    pending = None
                codes.append(("equal", *span))
            elif pending is None:
                pending = span
            else:
                pending = (pending[0], span[1], pending[2], span[3])
        if pending:
            codes.append(_changed(*pending))
    elif middle_left or middle_right:
        end_left, end_right = len(left) - suffix, len(right) - suffix
        codes.append(_changed(prefix, end_left, prefix, end_right))
    if suffix:
        codes.append(("equal", len(left) - suffix, len(left), len(right) - suffix, len(right)))
    return codes


def _changed(i1: int, i2: int, j1: int, j2: int) -> tuple[str, int, int, int, int]:
    tag = "replace" if i1 < i2 and j1 < j2 else "delete" if i1 < i2 else "insert"
    return (tag, i1, i2, j1, j2)


def _shown(codes, context: int) -> list[tuple]:
    """The opcodes with unchanged stretches cut to `context` lines around each change:
    ("skip", count) marks what is left out. A negative context keeps every line."""
    if context < 0 or not any(code[0] != "equal" for code in codes):
        return list(codes) if context < 0 else []
    shown: list[tuple] = []
    last = len(codes) - 1
    for index, (tag, i1, i2, j1, j2) in enumerate(codes):
        if tag != "equal":
            shown.append((tag, i1, i2, j1, j2))
            continue
        keep_head = 0 if index == 0 else context  # after a change
        keep_tail = 0 if index == last else context  # before a change
        if i2 - i1 <= keep_head + keep_tail:
            shown.append((tag, i1, i2, j1, j2))
            continue
        if keep_head:
            shown.append((tag, i1, i1 + keep_head, j1, j1 + keep_head))
        shown.append(("skip", i2 - i1 - keep_head - keep_tail))
        if keep_tail:
            shown.append((tag, i2 - keep_tail, i2, j2 - keep_tail, j2))
    return shown


def _row_count(shown) -> int:
    return sum(
        1 if code[0] == "skip" else max(code[2] - code[1], code[4] - code[3]) for code in shown
    )


def side_by_side(
    before: str, after: str, *, context: int = 3, budget: Budget | None = None
) -> tuple[list[Row], int, int]:
    """Rows of the diff from `before` to `after` with `context` unchanged lines around each
    change (a negative context keeps every line), and the counts of added and removed lines.
    DiffTooLarge when it would pass `budget` (a fresh Budget by default; spent otherwise)."""
    budget = budget if budget is not None else Budget()
    size = len(before) + len(after)
    if size > budget.chars:
        raise DiffTooLarge(0)
    budget.chars -= size
    left, right = before.splitlines(), after.splitlines()
    codes = _opcodes(left, right, budget)
    added = sum(j2 - j1 for tag, _, _, j1, j2 in codes if tag != "equal")
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag != "equal")
    shown = _shown(codes, context)
    count = _row_count(shown)
    if count > budget.rows:
        raise DiffTooLarge(added + removed, exact=True)
    budget.rows -= count
    rows: list[Row] = []
    for code in shown:
        if code[0] == "skip":
            rows.append(Row("skip", skipped=code[1]))
            continue
        tag, i1, i2, j1, j2 = code
        if tag == "equal":
            rows.extend(
                Row("equal", i + 1, left[i], j + 1, right[j])
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            )
            continue
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
    return rows, added, removed


def file_diff(
    path: str,
    before: str | None,
    after: str | None,
    *,
    context: int = 3,
    budget: Budget | None = None,
) -> FileDiff:
    """The diff of one path (None stands for a file absent on that side), or its fallback
    (`too_large`, `summary`) when a side passes MAX_DIFF_CHARS or the diff `budget`."""
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
        result.too_large = True  # sizes only: not even its lines are read
        return result
    try:
        result.rows, result.added, result.removed = side_by_side(
            before or "", after or "", context=context, budget=budget
        )
    except DiffTooLarge as too_large:
        result.too_large = True
        if too_large.changed or too_large.exact:
            result.changed_lines, result.exact = too_large.changed, too_large.exact
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
    no earlier version (a new skill): everything is added. The files share one Budget: once
    it is spent, the remaining changed files show their fallback."""
    before_files = before_files or {}
    pairs = [(SKILL_FILE, before_md, after_md)] + [
        (path, before_files.get(path), after_files.get(path))
        for path in sorted(set(before_files) | set(after_files))
    ]
    diffs = []
    budget = Budget()
    for path, before, after in pairs:
        diff = file_diff(path, before, after, context=context, budget=budget)
        if include_unchanged or diff.changed:
            diffs.append(diff)
    return diffs


def content_diff_cached(*, before, after, context: int = 3) -> list[FileDiff]:
    """`content_diff` from `before` to `after` (stored contents: a SkillVersion or a
    SkillProposal with `skill_md`, `files` and `content_hash`; `before` None for a new
    skill), computed once per pair of contents and then read from the cache, keyed by their
    content hashes. A cache that does not answer costs a computation, never an error."""
    before_hash = "new"
    if before is not None:
        before_hash = before.content_hash or content_hash(before.skill_md, before.files)
    after_hash = after.content_hash or content_hash(after.skill_md, after.files)
    key = f"skills:diff:{CACHE_FORMAT}:{before_hash}:{after_hash}:{context}"
    try:
        cached = cache.get(key)
    except Exception:  # noqa: BLE001 - the cache only saves work; Redis may be away
        logger.warning("skills diff cache unavailable", exc_info=True)
        cached = None
    if cached is not None:
        return cached
    diffs = content_diff(
        before.skill_md if before is not None else None,
        before.files if before is not None else None,
        after.skill_md,
        after.files or {},
        context=context,
    )
    try:
        cache.set(key, diffs, CACHE_SECONDS)
    except Exception:  # noqa: BLE001 - as above
        logger.warning("skills diff cache unavailable", exc_info=True)
    return diffs


def unified_text(diffs: list[FileDiff], *, limit: int = 3000) -> str:
    """A compact unified-style text of the diffs (for Telegram and terminals), cut to
    `limit` characters with a note of what was left out."""
    out: list[str] = []
    for diff in diffs:
        if not diff.changed:
            continue
        if diff.too_large:
            out.append(f"{diff.path} ({diff.status})")
            out.append(f"  {diff.summary} View the raw text on the dashboard.")
            continue
        out.append(f"{diff.path} ({diff.status}, +{diff.added} -{diff.removed})")
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
