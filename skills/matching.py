"""Tolerant find-and-replace for `skill_manage(action="patch")`.

Models quote text imperfectly: re-indented, with trailing spaces lost, with `\\n` written out,
with typographic quotes. The needle is searched at increasing levels of tolerance, in this
fixed order, and the first level that finds anything decides:

1. exact
2. line-trimmed: trailing whitespace of every line ignored
3. whitespace-normalised: also runs of spaces and tabs count as one space
4. indentation-flexible: also leading indentation ignored (the replacement is re-indented
   to the matched text's indentation)
5. escape-normalised: also `\\n`, `\\t`, `\\"` and `\\'` written out in the needle read as the
   characters they stand for
6. Unicode-normalised: also curly quotes, primes, dashes and non-breaking spaces read as
   their ASCII forms

Each level includes the ones before it. Several matches need `replace_all`; no match is
refused with the nearest candidates (scored by rapidfuzz) so the model can quote them.
"""

import re
from dataclasses import dataclass

from rapidfuzz import fuzz

LEVELS = (
    "exact",
    "line-trimmed",
    "whitespace-normalised",
    "indentation-flexible",
    "escape-normalised",
    "unicode-normalised",
)
FOLD = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
        "\u00a0": " ",
        "\u202f": " ",
        "\u2007": " ",
    }
)
ESCAPES = {"\\n": "\n", "\\t": "\t", '\\"': '"', "\\'": "'"}
ESCAPE_RE = re.compile(r"\\[nt\"']")
EXCERPT_CHARS = 160
CANDIDATES = 3
CANDIDATE_WINDOWS = 5_000  # windows scored for "nearest text" at most
SCORED_CHARS = 300  # characters of the needle and of each window compared
INDENT_RE = re.compile(r"[ \t]*")
LEADING_RE = re.compile(r"^[ \t]+", re.MULTILINE)


class PatchError(ValueError):
    """The patch cannot be applied; the message says why and what to send instead."""


@dataclass(frozen=True)
class PatchResult:
    text: str
    level: str
    count: int


def _unescape(text: str) -> str:
    return ESCAPE_RE.sub(lambda m: ESCAPES[m.group(0)], text)


def _normalise(text: str, level: int) -> tuple[str, list[int]]:
    """`text` at tolerance `level` (index into LEVELS), and for every character kept the
    index of the original character it came from."""
    out: list[str] = []
    where: list[int] = []
    offset = 0
    lines = text.split("\n")
    for number, line in enumerate(lines):
        end = len(line.rstrip()) if level >= 1 else len(line)
        start = 0
        if level >= 3:
            start = min(end, len(line) - len(line.lstrip()))
        previous_space = False
        # Below indentation-flexible, leading indentation is compared as it is.
        inner = start if level >= 3 else min(end, len(line) - len(line.lstrip(" \t")))
        for i in range(start, end):
            ch = line[i]
            if level >= 5:
                ch = ch.translate(FOLD)
            if level >= 2 and i >= inner and ch in " \t":
                if previous_space:
                    continue
                ch, previous_space = " ", True
            else:
                previous_space = False
            out.append(ch)
            where.append(offset + i)
        if number < len(lines) - 1:
            out.append("\n")
            where.append(offset + len(line))
        offset += len(line) + 1
    return "".join(out), where


def _prepare_needle(needle: str, level: int) -> str:
    if level >= 4:
        needle = _unescape(needle)
    if level >= 1:
        needle = needle.strip("\n")
    normal, _ = _normalise(needle, level)
    if level >= 1:
        normal = normal.strip()
    return normal


def _find(text: str, needle: str, level: int) -> list[tuple[int, int]]:
    """Non-overlapping (start, end) spans in `text` matching `needle` at `level`."""
    wanted = _prepare_needle(needle, level)
    if not wanted:
        return []
    haystack, where = _normalise(text, level)
    # finditer walks the text in C (non-overlapping, left to right, like str.replace).
    last = len(wanted) - 1
    return [
        (where[m.start()], where[m.start() + last] + 1)
        for m in re.finditer(re.escape(wanted), haystack)
    ]


def _exact(text: str, old: str, new: str, replace_all: bool, max_chars: int | None):
    """The exact level without a span per match: counted and replaced by str methods, in C
    (a replace_all of hundreds of thousands of matches in a 1 MiB file), or None."""
    count = text.count(old)
    if not count:
        return None
    if count > 1 and not replace_all:
        places, start = [], 0
        while len(places) < 5 and (found := text.find(old, start)) != -1:
            places.append((found, found + len(old)))  # the first places, for the refusal
            start = found + len(old)
        return places, count
    size = len(text) + count * (len(new) - len(old))
    if max_chars is not None and size > max_chars:
        raise _size_error(size, count, len(new), max_chars)
    return PatchResult(text=text.replace(old, new), level=LEVELS[0], count=count)


def _size_error(size: int, count: int, replacement: int, max_chars: int) -> "PatchError":
    return PatchError(
        f"the patched text would have up to {size:,} characters ({count:,} matches × "
        f"{replacement:,} characters); at most {max_chars:,} are allowed. Replace fewer "
        "places or with shorter text."
    )


def _line_end_blank(text: str, end: int) -> int:
    """`end` moved over the trailing spaces and tabs of its line (ignored by the match)."""
    stop = end
    while stop < len(text) and text[stop] in " \t":
        stop += 1
    return stop if stop == len(text) or text[stop] == "\n" else end


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _reindent(replacement: str, needle: str, want: str) -> str:
    """The replacement moved from the needle's indentation to `want`, the matched text's."""
    needle_lines = [line for line in needle.split("\n") if line.strip()]
    if not needle_lines:
        return replacement
    have = _indent(needle_lines[0])
    lines = replacement.split("\n")
    first = lines[0].removeprefix(have) if lines[0].startswith(have) else lines[0].lstrip(" \t")
    rest = [
        (want + line.removeprefix(have)) if line.startswith(have) and line.strip() else line
        for line in lines[1:]
    ]
    return "\n".join([first, *rest])


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _excerpt(text: str) -> str:
    one_line = " ⏎ ".join(line.strip() for line in text.strip().split("\n"))
    if len(one_line) > EXCERPT_CHARS:
        one_line = one_line[: EXCERPT_CHARS - 1] + "…"
    return one_line


def nearest_candidates(text: str, needle: str, limit: int = CANDIDATES) -> list[str]:
    """The windows of `text` (as many lines as the needle) most similar to it, best first,
    each as "line N: excerpt". Bounded work: at most CANDIDATE_WINDOWS windows (evenly
    spaced over a long text), each compared on its first SCORED_CHARS characters."""
    lines = text.split("\n")
    size = max(1, len(needle.strip("\n").split("\n")))
    wanted = " ".join(needle[: SCORED_CHARS * 4].split()).translate(FOLD)[:SCORED_CHARS]
    windows = max(1, len(lines) - size + 1)
    stride = -(-windows // CANDIDATE_WINDOWS)  # ceiling: a huge text is sampled, not scanned
    scored = []
    for index in range(0, windows, stride):
        window = "\n".join(lines[index : index + min(size, SCORED_CHARS)])
        if not window.strip():
            continue
        shown = " ".join(window[: SCORED_CHARS * 4].split()).translate(FOLD)[:SCORED_CHARS]
        scored.append((fuzz.ratio(wanted, shown), index, window))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [f"line {index + 1}: {_excerpt(window)}" for _, index, window in scored[:limit]]


def _too_large(text: str, spans, replacement: str, reindent: bool, max_chars: int) -> int:
    """An upper bound of the patched text's length when it passes `max_chars` (0 if not),
    counted before anything is built: a replace_all of a long text by a long replacement
    would otherwise build a result of matches × replacement characters first."""
    removed = sum(end - start for start, end in spans)
    # Re-indentation adds at most the longest indentation of `text` to each replaced line.
    widest = max((len(m) for m in LEADING_RE.findall(text)), default=0) if reindent else 0
    piece = len(replacement) + replacement.count("\n") * widest
    size = len(text) - removed + len(spans) * piece
    return size if size > max_chars else 0


def _build(text, spans, replacement, needle, reindent, level, old) -> str:
    """`text` with every span replaced, in one pass: the pieces are joined once at the end
    (repeated slicing of the whole text per match was quadratic), and each matched line's
    indentation is found from the line start reached so far, never by rescanning `text`."""
    pieces: list[str] = []
    position = searched = line_start = 0
    reindented: dict[str, str] = {}  # one re-indented replacement per indentation seen
    plain = replacement.lstrip(" \t") if level >= 1 and old.strip("\n")[:1] in (" ", "\t") else None
    for start, end in spans:
        piece = replacement
        if reindent:
            # Each stretch of text is searched once: from the previous span's start on.
            newline = text.rfind("\n", searched, start)
            if newline != -1:
                line_start = newline + 1
            searched = start
            want = INDENT_RE.match(text, line_start).group(0)
            if want not in reindented:
                reindented[want] = _reindent(replacement, needle, want)
            piece = reindented[want]
        elif plain is not None:
            piece = plain
        pieces.append(text[position:start])
        pieces.append(piece)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


def apply_patch(
    text: str, old: str, new: str, *, replace_all: bool = False, max_chars: int | None = None
) -> PatchResult:
    """`text` with `old` replaced by `new`, matched at the first tolerance level that finds
    it, built in one pass; PatchError for an empty, missing or (without `replace_all`)
    ambiguous needle, or (with `max_chars`) a result that would be longer, refused before
    it is built."""
    if not old or not old.strip():
        raise PatchError("`old_string` is empty: quote the exact text to replace.")
    for level, name in enumerate(LEVELS):
        if level in (4,) and not ESCAPE_RE.search(old):
            continue  # the same search as the level before
        if level == 5 and old.translate(FOLD) == old and text.translate(FOLD) == text:
            continue
        count = None
        if level == 0:
            exact = _exact(text, old, new, replace_all, max_chars)
            if isinstance(exact, PatchResult):
                return exact
            spans, count = exact or ([], 0)
        else:
            spans = _find(text, old, level)
        if not spans:
            continue
        count = count or len(spans)
        if count > 1 and not replace_all:
            places = "; ".join(
                f"line {_line_of(text, s)}: {_excerpt(text[s:e])}" for s, e in spans[:5]
            )
            raise PatchError(
                f"`old_string` matches {count} places ({name} match): {places}. Quote more "
                "surrounding text so it matches one place, or set replace_all=true."
            )
        replacement = new
        if level >= 4 and ESCAPE_RE.search(old) and "\n" not in new:
            replacement = _unescape(new)
        if level >= 1:
            # The needle's edge newlines were not part of the match: nor are the new text's.
            quoted = _unescape(old) if level >= 4 else old
            if quoted.endswith("\n"):
                replacement = replacement.removesuffix("\n")
            if quoted.startswith("\n"):
                replacement = replacement.removeprefix("\n")
            spans = [(start, _line_end_blank(text, end)) for start, end in spans]
        quoted_needle = _unescape(old) if level >= 4 else old
        reindent = level >= 1 and "\n" in replacement
        if max_chars is not None:
            size = _too_large(text, spans, replacement, reindent, max_chars)
            if size:
                raise _size_error(size, len(spans), len(replacement), max_chars)
        result = _build(text, spans, replacement, quoted_needle, reindent, level, old)
        return PatchResult(text=result, level=name, count=len(spans))
    candidates = nearest_candidates(text, old)
    hint = " Nearest text: " + " | ".join(candidates) if candidates else ""
    raise PatchError(
        "`old_string` was not found (also not with whitespace, indentation, escapes or "
        f"quotes normalised).{hint}. View the skill and quote its current text."
    )
