"""The normalised copy every phrase rule matches on, with offsets mapped back."""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right

from hermes_site.scanning.hidden import BLANKS, HIDDEN_CHARS, is_stripped

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "\u201c": '"', "\u201d": '"'})
# Han, CJK punctuation and full-width punctuation, not full-width letters ("ＩＧＮＯＲＥ ＡＬＬ").
_CJK = (
    r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f"
    r"\uff01-\uff0f\uff1a-\uff20\uff5b-\uff65"
)
_CJK_CHAR = re.compile(rf"[{_CJK}]")
# Non-ASCII runs, with the ASCII whitespace between them, are the only parts that need more
# than `lower()`; ASCII text is normalised in one call. Whitespace is not collapsed: every
# rule matches gaps with `\s+`, which is the same thing without moving offsets.
_NON_ASCII_CHUNK = re.compile(r"[^\x00-\x7f]+(?:[\t\n\x0b\x0c\r ]+[^\x00-\x7f]+)*")
_CHUNK_PART = re.compile(r"(?P<gap>[\t\n\x0b\x0c\r ]+)|(?P<run>[^\x00-\x7f]+)")
_NEEDS_CHAR_BY_CHAR = re.compile(rf"[\s{HIDDEN_CHARS}]")


def _fold(s: str) -> str:
    return unicodedata.normalize("NFKC", s).casefold().translate(_QUOTES)


_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")


def _fold_char(ch: str) -> str:
    """One character folded; a parenthesized letter ("⒤", NFKC "(i)") reads as the letter,
    so "⒤⒢⒩⒪⒭⒠" is the word it spells."""
    folded = _fold(ch)
    if len(folded) == 3 and folded[0] + folded[2] == "()" and folded[1] in _ASCII_LETTERS:
        return folded[1]
    return folded


class Normalised:
    """The normalised text plus a piecewise map from its offsets back to the original."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.length = 0
        self.norm_starts: list[int] = []
        self.orig: list[tuple[int, int, bool]] = []  # (orig_start, orig_end, one-to-one)
        self.text = ""

    def add(self, piece: str, orig_start: int, orig_end: int) -> None:
        if not piece:
            return
        self.norm_starts.append(self.length)
        self.orig.append((orig_start, orig_end, len(piece) == orig_end - orig_start))
        self.pieces.append(piece)
        self.length += len(piece)

    def last_char(self) -> str:
        return self.pieces[-1][-1] if self.pieces else ""

    def _char_span(self, i: int) -> tuple[int, int]:
        k = bisect_right(self.norm_starts, i) - 1
        orig_start, orig_end, linear = self.orig[k]
        if linear:
            o = orig_start + (i - self.norm_starts[k])
            return o, o + 1
        return orig_start, orig_end

    def span(self, start: int, end: int) -> tuple[int, int]:
        """Original offsets covering normalised `start:end` (end exclusive, non-empty)."""
        return self._char_span(start)[0], self._char_span(max(start, end - 1))[1]

    def finish(self) -> None:
        self.text = "".join(self.pieces)


class Derived(Normalised):
    """A rewrite of another view (deletions, one-to-one replacements); offsets map through
    the view it was made from back to the original text."""

    def __init__(self, parent: Normalised) -> None:
        super().__init__()
        self.parent = parent

    def span(self, start: int, end: int) -> tuple[int, int]:
        mid_start, mid_end = super().span(start, end)
        return self.parent.span(mid_start, mid_end)


class Relabelled(Normalised):
    """Another view's text with some characters replaced one for one: same offsets."""

    def __init__(self, parent: Normalised, text: str) -> None:
        super().__init__()
        self.parent = parent
        self.text = text

    def span(self, start: int, end: int) -> tuple[int, int]:
        return self.parent.span(start, end)


class Payload(Normalised):
    """Text decoded from somewhere in the original, each character with its source span."""

    def __init__(self, text: str, sources: list[tuple[int, int]]) -> None:
        super().__init__()
        self.text = text
        self.sources = sources

    def span(self, start: int, end: int) -> tuple[int, int]:
        return self.sources[start][0], self.sources[max(start, end - 1)][1]


def normalise(text: str) -> Normalised:
    """NFKC + casefold, hidden characters stripped, spaces between CJK characters dropped
    (they are a cheap way to dodge "忽 略 指 令")."""
    norm = Normalised()
    if text.isascii():
        norm.add(text.lower(), 0, len(text))
        norm.text = norm.pieces[0]
        return norm
    pos = 0
    for chunk in _NON_ASCII_CHUNK.finditer(text):
        if chunk.start() > pos:
            norm.add(text[pos : chunk.start()].lower(), pos, chunk.start())
        for part in _CHUNK_PART.finditer(text, chunk.start(), chunk.end()):
            _add_part(norm, text, part.start(), part.end(), part.lastgroup == "gap")
        pos = chunk.end()
    if pos < len(text):
        norm.add(text[pos:].lower(), pos, len(text))
    norm.text = "".join(norm.pieces)
    return norm


def _between_cjk(norm: Normalised, text: str, after: int) -> bool:
    if not _CJK_CHAR.match(norm.last_char()):
        return False
    while after < len(text) and (text[after].isspace() or is_stripped(text[after])):
        after += 1
    return after < len(text) and _CJK_CHAR.match(text[after]) is not None


def _add_part(norm: Normalised, text: str, start: int, end: int, gap: bool) -> None:
    run = text[start:end]
    if gap:
        if not _between_cjk(norm, text, end):
            norm.add(run, start, end)
        return
    folded = _fold(run)
    if len(folded) == len(run) and not _NEEDS_CHAR_BY_CHAR.search(run):
        norm.add(folded, start, end)
        return
    for i in range(start, end):
        ch = text[i]
        if is_stripped(ch) or (ch.isspace() and _between_cjk(norm, text, i + 1)):
            continue
        norm.add(" " if ch in BLANKS else _fold_char(ch), i, i + 1)


_CONTINUATION = re.compile(r"\\\r?\n")


def continuations_joined(view: Normalised) -> Normalised:
    """`view` with each shell line continuation (a backslash ending a line, `\\r\\n` too)
    read as spaces, so a command written over several lines is one line to the command
    rules; same offsets. The phrase rules keep the lines: there a line start still counts."""
    text = view.text
    if "\\\n" not in text and "\\\r\n" not in text:
        return view
    return Relabelled(view, _CONTINUATION.sub(lambda m: " " * len(m.group()), text))


def is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"
