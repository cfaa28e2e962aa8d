"""Hidden Unicode: which code points are invisible, which uses of them are legitimate,
and the findings for the rest (on the original text)."""

from __future__ import annotations

import re
import unicodedata

# Every Cf character in Unicode 15 except U+00AD (soft hyphen is allowed), plus invisible
# fillers and selectors used to smuggle text; a test keeps this in step with `unicodedata`.
_CF_RANGES = (
    "\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_HIDDEN_CHARS = _CF_RANGES + "\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0f\U000e0100-\U000e01ef"


def _is_stripped(ch: str) -> bool:
    """Characters removed before matching: format controls and invisible fillers."""
    cp = ord(ch)
    return (
        unicodedata.category(ch) == "Cf"
        or 0xFE00 <= cp <= 0xFE0F
        or 0xE0100 <= cp <= 0xE01EF
        or cp in (0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0)
    )


_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
_ZERO_WIDTH = (
    frozenset(range(0x200B, 0x2010)) | frozenset(range(0x2060, 0x2065)) | frozenset({0xFEFF})
)
_HIDDEN = re.compile(rf"[{_HIDDEN_CHARS}]+")
_FLAG_TAG_SEQUENCE = re.compile(r"\U0001f3f4[\U000e0020-\U000e007e]{1,10}\U000e007f")
_JOINING_SCRIPTS = (
    (0x0600, 0x08FF),  # Arabic, Syriac, Thaana, …
    (0x0900, 0x0DFF),  # Indic scripts and Sinhala
    (0x0E00, 0x0FFF),  # Thai, Lao, Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0xFB50, 0xFDFF),  # Arabic presentation forms
    (0xFE70, 0xFEFE),
)


def _is_emoji_part(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x1F000 <= cp <= 0x1FAFF
        or 0x2190 <= cp <= 0x2BFF
        or cp in (0xFE0F, 0x20E3, 0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0x3030)
    )


def _is_joining_letter(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _JOINING_SCRIPTS) and unicodedata.category(ch)[0] in (
        "L",
        "M",
    )


def _allowed_hidden(text: str, i: int, flag_positions: set[int]) -> bool:
    ch = text[i]
    if i in flag_positions:
        return True
    if ch == "\ufeff" and i == 0:
        return True
    if 0xFE00 <= ord(ch) <= 0xFE0F:  # one selector picks emoji or text style; a run hides data
        return not _next_to_selector(text, i)
    if ch in "\u200c\u200d" and 0 < i < len(text) - 1:
        before, after = text[i - 1], text[i + 1]
        if ch == "\u200d" and _is_emoji_part(before) and _is_emoji_part(after):
            return True
        return _is_joining_letter(before) and _is_joining_letter(after)
    return False


def _hidden_kind(ch: str) -> str:
    cp = ord(ch)
    if cp in _BIDI:
        return "bidi"
    if 0xE0000 <= cp <= 0xE007F:
        return "tag"
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
        return "selector"
    if cp in _ZERO_WIDTH:
        return "zero_width"
    return "format"


_HIDDEN_REASONS = {
    "bidi": ("bidi_control", "contains bidirectional control characters that reorder text"),
    "tag": ("invisible_unicode", "contains invisible Unicode tag characters that can hide text"),
    "selector": ("invisible_unicode", "contains stacked variation selectors that can hide data"),
    "zero_width": ("invisible_unicode", "contains zero-width characters"),
    "format": ("invisible_unicode", "contains invisible formatting characters"),
}


def _hidden_unicode_findings(
    text: str,
) -> list[tuple[str | None, int, int, tuple[str, str, int, int, bool]]]:
    """Runs of hidden characters, split by kind; allowed runs come back with kind None so the
    excerpt renderer can leave them as they are."""
    if text.isascii():
        return []
    flag_positions = {
        i for m in _FLAG_TAG_SEQUENCE.finditer(text) for i in range(m.start() + 1, m.end())
    }
    out: list[tuple[str | None, int, int, tuple[str, str, int, int, bool]]] = []
    for m in _HIDDEN.finditer(text):
        run_kind: str | None = None
        run_start = m.start()
        for i in range(m.start(), m.end()):
            kind = None if _allowed_hidden(text, i, flag_positions) else _hidden_kind(text[i])
            if i > run_start and kind != run_kind:
                out.append(_hidden_entry(text, run_kind, run_start, i))
                run_start = i
            run_kind = kind
        out.append(_hidden_entry(text, run_kind, run_start, m.end()))
    return out


def _hidden_entry(
    text: str, kind: str | None, start: int, end: int
) -> tuple[str | None, int, int, tuple[str, str, int, int, bool]]:
    if kind is None:
        return (None, start, end, ("", "", start, end, False))
    category, reason = _HIDDEN_REASONS[kind]
    if kind in ("zero_width", "format", "bidi"):
        names = sorted({_char_label(c) for c in text[start:end]})
        reason = f"{reason} ({', '.join(names[:3])}{', …' if len(names) > 3 else ''})"
    return (kind, start, end, (category, reason, start, end, False))


def _char_label(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'UNNAMED')}"


def _next_to_selector(text: str, i: int) -> bool:
    return any(0 <= j < len(text) and 0xFE00 <= ord(text[j]) <= 0xFE0F for j in (i - 1, i + 1))
