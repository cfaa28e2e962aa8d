"""Where a match sits in Markdown or code: quoted as an example, or written as data in an
inline code span, a string literal or a fenced block of code. Each check reads at most
`WINDOW` characters of the match's line, and fences are found once per text, so the phrase
rules stay linear."""

from __future__ import annotations

import re
from bisect import bisect_right

WINDOW = 300
# Fences whose info string names a programming or data language: their content is code.
_CODE_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]{0,20})[^\n`]*$", re.MULTILINE
)
_LANGUAGE_NAMES = (
    "python py python3 ipython pycon json jsonl json5 yaml yml jinja jinja2 j2 js javascript"
    " mjs ts typescript tsx jsx toml sh bash shell zsh console c cpp c++ rust rs go java kotlin"
    " ruby rb perl php xml html csv sql ini cfg conf dockerfile make makefile lua r julia"
    " swift scala elixir"
)
_CODE_LANGUAGES = frozenset(_LANGUAGE_NAMES.split())
_OPEN_QUOTES = {'"': '"', "'": "'", "`": "`", "「": "」", "『": "』", "«": "»", "„": '"'}


def _line(text: str, start: int, end: int) -> tuple[str, str]:
    """The part of the match's line before it and after it (each at most WINDOW chars)."""
    lo = text.rfind("\n", max(0, start - WINDOW), start) + 1
    hi = text.find("\n", end, end + WINDOW)
    if lo == 0 and start > WINDOW:
        lo = start - WINDOW
    return text[lo:start], text[end : (end + WINDOW if hi == -1 else hi)]


def quoted(text: str, start: int, end: int) -> bool:
    """True when the match is quoted as an example: an opening quote right before it (spaces
    allowed) and its closing quote later on the same line (`type "roleplay as a pirate"`)."""
    before, after = _line(text, start, end)
    stripped = before.rstrip()
    if not stripped or stripped[-1] not in _OPEN_QUOTES:
        return False
    return _OPEN_QUOTES[stripped[-1]] in after


def in_code(text: str, start: int, end: int) -> bool:
    """True when the match is data in code: inside an inline code span, inside a double-quoted
    string literal or at the edge of a single-quoted one (`stop=['</s>']`), or inside a
    fenced block whose info string names a language (```python, ```json …)."""
    before, after = _line(text, start, end)
    if before.count("`") % 2 == 1 and "`" in after:
        return True
    if before.count('"') % 2 == 1 and '"' in after and _opens_literal(before, '"'):
        return True
    if (before.endswith("'") or after.startswith("'")) and _opens_literal(before, "'"):
        return True
    return _in_code_fence(text, start)


# A string literal in code follows `=`, `(`, `[`, `{` or `,` (`stop=["</s>"]`, `f"<|…|>"`);
# a quotation in prose ('Note: "<|im_start|>system …"') does not.
_LITERAL_START = re.compile(r"(?:^|[=(\[{,+])\s*[rbfu]{0,2}\Z")


def _opens_literal(before: str, quote: str) -> bool:
    opening = before.rfind(quote)
    return opening != -1 and _LITERAL_START.search(before, 0, opening) is not None


_last: tuple[str, list[int]] = ("", [])


def _in_code_fence(text: str, pos: int) -> bool:
    global _last
    if _last[0] is not text:  # the fences of the text being scanned, found once
        fenced = "```" in text or "~~~" in text
        _last = (text, _code_block_bounds(text) if fenced else [])
    bounds = _last[1]
    return bisect_right(bounds, pos) % 2 == 1


def _code_block_bounds(text: str) -> list[int]:
    """Start and end offsets of every fenced block of code, flattened and sorted."""
    bounds: list[int] = []
    opened: re.Match[str] | None = None
    for fence in _CODE_FENCE.finditer(text):
        if opened is None:
            opened = fence
            continue
        mark, opener = fence.group("fence"), opened.group("fence")
        if mark[0] == opener[0] and len(mark) >= len(opener) and not fence.group("lang"):
            if opened.group("lang") in _CODE_LANGUAGES:
                bounds += [opened.end(), fence.start()]
            opened = None
    if opened is not None and opened.group("lang") in _CODE_LANGUAGES:
        bounds += [opened.end(), len(text)]
    return bounds
