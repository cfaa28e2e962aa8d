"""Hidden Unicode: which code points are invisible, which uses of them are legitimate, the
findings for the rest (on the original text), and the payloads that tag characters and
variation selectors can carry.

The hidden set is principled rather than a list of known tricks: every format character
(general category Cf) plus every Default_Ignorable_Code_Point of DerivedCoreProperties.txt
(fillers, Mongolian selectors, Khmer inherent vowels, variation selectors, the whole
U+E0000–U+E0FFF block), plus U+2800 BRAILLE PATTERN BLANK, which renders as a blank.
Legitimate uses are allowed by context: ZWJ inside emoji sequences, ZWJ/ZWNJ between letters
of scripts that need them, one variation selector on a base that has variants (VS15/VS16 on
an emoji-capable character, an ideographic selector on a Han character, a Mongolian selector
on a Mongolian letter), a BOM that starts the text or one of the files joined into it (every
XSD of the office-document skills starts with one), and tag characters only inside the
recommended subdivision flags (England, Scotland, Wales: RGI_Emoji_Tag_Sequence of
emoji-sequences.txt). A BOM anywhere else is reported.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

# Category Cf (Unicode 15; a test keeps this in step with `unicodedata`) except U+00AD,
# then Default_Ignorable_Code_Point beyond Cf, then the braille blank.
_CF_RANGES = (
    "\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_DEFAULT_IGNORABLE = (
    "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u3164\ufe00-\ufe0f\uffa0\ufff0-\ufff8"
    "\U000e0000-\U000e0fff"
)
HIDDEN_CHARS = _CF_RANGES + _DEFAULT_IGNORABLE + "\u2800"
HIDDEN_RUN = re.compile(rf"[{HIDDEN_CHARS}]+")
_HIDDEN_ONE = re.compile(rf"[{HIDDEN_CHARS}\u00ad]")
# Invisible characters that take the width of a space: read as one when matching, so
# "ignore\u2800all" is "ignore all", not "ignoreall".
BLANKS = frozenset("\u115f\u1160\u2800\u3164\uffa0")


def is_stripped(ch: str) -> bool:
    """Characters removed before matching: format controls and default-ignorables."""
    return _HIDDEN_ONE.match(ch) is not None and ch not in BLANKS


_BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
_ZERO_WIDTH = (
    frozenset(range(0x200B, 0x2010)) | frozenset(range(0x2060, 0x2065)) | frozenset({0xFEFF})
)
_RGI_TAG_FLAG = re.compile(
    "\U0001f3f4\U000e0067\U000e0062(?:\U000e0065\U000e006e\U000e0067|\U000e0073\U000e0063"
    "\U000e0074|\U000e0077\U000e006c\U000e0073)\U000e007f"
)
_JOINING_SCRIPTS = (
    (0x0600, 0x08FF),  # Arabic, Syriac, Thaana, …
    (0x0900, 0x0DFF),  # Indic scripts and Sinhala
    (0x0E00, 0x0FFF),  # Thai, Lao, Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x1800, 0x18AF),  # Mongolian
    (0xFB50, 0xFDFF),  # Arabic presentation forms
    (0xFE70, 0xFEFE),
)


def is_selector(ch: str) -> bool:
    cp = ord(ch)
    return 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF


def _is_emoji_part(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x1F000 <= cp <= 0x1FAFF
        or 0x2190 <= cp <= 0x2BFF
        or cp in (0xFE0F, 0x20E3, 0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0x3030, 0x303D)
    )


def _is_joining_letter(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _JOINING_SCRIPTS) and unicodedata.category(ch)[0] in (
        "L",
        "M",
    )


def _is_han(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x3400 <= cp <= 0x4DBF
        or 0x4E00 <= cp <= 0x9FFF
        or 0xF900 <= cp <= 0xFAFF
        or (0x20000 <= cp <= 0x3FFFF)
    )


def _selector_has_base(text: str, i: int) -> bool:
    """One variation selector on a character that has variants; a second one is data."""
    if i == 0 or is_selector(text[i - 1]) or (i + 1 < len(text) and is_selector(text[i + 1])):
        return False
    base, cp = text[i - 1], ord(text[i])
    if cp in (0xFE0E, 0xFE0F):  # text or emoji presentation
        return (
            _is_emoji_part(base)
            or unicodedata.category(base) in ("So", "Sm", "Sk")
            or (base in "0123456789#*" and text[i + 1 : i + 2] == "\u20e3")
        )
    if cp >= 0xE0100:  # ideographic variation sequences
        return _is_han(base)
    return not base.isascii() and unicodedata.category(base)[0] in "LSN"


def _allowed_hidden(
    text: str, i: int, flag_positions: set[int], file_starts: frozenset[int]
) -> bool:
    ch = text[i]
    cp = ord(ch)
    if i in flag_positions:
        return True
    if ch == "\ufeff" and (i == 0 or i in file_starts):
        return True
    if is_selector(ch):
        return _selector_has_base(text, i)
    if 0x180B <= cp <= 0x180F and cp != 0x180E:  # Mongolian free variation selectors
        return i > 0 and 0x1820 <= ord(text[i - 1]) <= 0x18AA
    if ch in "\u200c\u200d\u180e" and 0 < i < len(text) - 1:
        before, after = text[i - 1], text[i + 1]
        if ch == "\u200d" and _is_emoji_part(before) and _is_emoji_part(after):
            return True
        return _is_joining_letter(before) and _is_joining_letter(after)
    return False


def hidden_kind(ch: str) -> str:
    cp = ord(ch)
    if cp in _BIDI:
        return "bidi"
    if 0xE0000 <= cp <= 0xE007F:
        return "tag"
    if is_selector(ch):
        return "selector"
    if cp in _ZERO_WIDTH:
        return "zero_width"
    return "format"


_HIDDEN_REASONS = {
    "bidi": ("bidi_control", "contains bidirectional control characters that reorder text"),
    "tag": ("invisible_unicode", "contains invisible Unicode tag characters that can hide text"),
    "selector": ("invisible_unicode", "contains variation selectors that can hide data"),
    "zero_width": ("invisible_unicode", "contains zero-width characters"),
    "format": ("invisible_unicode", "contains invisible formatting characters"),
}


@dataclass(frozen=True)
class Run:
    """A run of hidden characters of one kind; `kind` None means a legitimate use."""

    kind: str | None
    start: int
    end: int


def hidden_runs(text: str, file_starts: frozenset[int] = frozenset()) -> list[Run]:
    """Runs of hidden characters, split by kind, legitimate ones included (kind None).
    `file_starts` are the offsets where a file begins in a text joined from several files:
    a byte-order mark there is the file's own first character, not hidden text."""
    if text.isascii():
        return []
    flag_positions = {
        i for m in _RGI_TAG_FLAG.finditer(text) for i in range(m.start() + 1, m.end())
    }
    runs: list[Run] = []
    for m in HIDDEN_RUN.finditer(text):
        run_kind: str | None = None
        run_start = m.start()
        for i in range(m.start(), m.end()):
            kind = (
                None
                if _allowed_hidden(text, i, flag_positions, file_starts)
                else hidden_kind(text[i])
            )
            if i > run_start and kind != run_kind:
                runs.append(Run(run_kind, run_start, i))
                run_start = i
            run_kind = kind
        runs.append(Run(run_kind, run_start, m.end()))
    return runs


def hidden_findings(
    text: str, runs: list[Run], *, redact: Callable[[str], str]
) -> list[tuple[str, str, int, int, bool]]:
    """A finding per run that is not a legitimate use, its reason naming what it hides
    (a decoded payload passes through `redact`, so a hidden credential is not repeated)."""
    out = []
    for run in runs:
        if run.kind is None:
            continue
        category, reason = _HIDDEN_REASONS[run.kind]
        chunk = text[run.start : run.end]
        payload = ""
        if run.kind == "tag":
            payload = tag_text(chunk)
        elif run.kind == "selector":
            payload = selector_text(chunk) or ""
        if payload.strip():
            payload = redact(payload)
            shown = payload if len(payload) <= 60 else payload[:59] + "…"
            reason = f'{reason}: "{quote(shown)}"'
        elif run.kind in ("zero_width", "format", "bidi", "selector"):
            names = sorted({char_label(c) for c in chunk})
            reason = f"{reason} ({', '.join(names[:3])}{', …' if len(names) > 3 else ''})"
        out.append((category, reason, run.start, run.end, False))
    return out


def char_label(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'UNNAMED')}"


def quote(payload: str) -> str:
    """A decoded payload made printable and unambiguous inside double quotes."""
    out = []
    for ch in payload:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "".join(out)


# --- Payloads ------------------------------------------------------------------------------


def tag_text(chunk: str) -> str:
    """The ASCII that tag characters spell (language tag and cancel tag carry none)."""
    return "".join(chr(ord(c) - 0xE0000) for c in chunk if 0xE0020 <= ord(c) <= 0xE007E)


def selector_bytes(chunk: str) -> bytes:
    """Variation selectors read as bytes, the way smuggling tools encode them: VS1–VS16 are
    0–15, VS17–VS256 are 16–255."""
    out = bytearray()
    for c in chunk:
        cp = ord(c)
        if 0xFE00 <= cp <= 0xFE0F:
            out.append(cp - 0xFE00)
        elif 0xE0100 <= cp <= 0xE01EF:
            out.append(cp - 0xE0100 + 16)
    return bytes(out)


def selector_text(chunk: str) -> str | None:
    """The text a run of selectors spells, if it spells printable UTF-8 text."""
    data = selector_bytes(chunk)
    if len(data) < 2:
        return None
    decoded, _ = decode_utf8(data)
    return decoded if looks_like_text(decoded) else None


def decode_utf8(data: bytes) -> tuple[str, list[tuple[int, int]]]:
    """`data` as UTF-8 with each character's byte span; a byte that is not UTF-8 reads as
    U+FFFD, so junk appended to a payload cannot hide the text before it."""
    decoded = data.decode("utf-8", errors="surrogateescape")
    spans: list[tuple[int, int]] = []
    pos = 0
    for ch in decoded:
        size = 1 if 0xDC80 <= ord(ch) <= 0xDCFF else len(ch.encode("utf-8"))
        spans.append((pos, pos + size))
        pos += size
    return _SURROGATE.sub("\ufffd", decoded), spans


_SURROGATE = re.compile("[\udc80-\udcff]")


def looks_like_text(decoded: str) -> bool:
    """Mostly printable characters with at least one letter: worth scanning as text."""
    if not decoded or not any(c.isalpha() for c in decoded):
        return False
    printable = sum(1 for c in decoded if (c.isprintable() and c != "\ufffd") or c in "\t\n\r")
    return printable >= 0.9 * len(decoded)


def tag_payload(text: str, runs: list[Run]) -> tuple[str, list[int]] | None:
    """Every non-legitimate tag run's ASCII, concatenated in order (an instruction split over
    several flags reads as one), with the original position of each decoded character."""
    chars: list[str] = []
    positions: list[int] = []
    for run in runs:
        if run.kind != "tag":
            continue
        for i in range(run.start, run.end):
            cp = ord(text[i])
            if 0xE0020 <= cp <= 0xE007E:
                chars.append(chr(cp - 0xE0000))
                positions.append(i)
    return ("".join(chars), positions) if chars else None


def selector_payloads(text: str, runs: list[Run]) -> list[tuple[str, list[tuple[int, int]]]]:
    """Selector runs that spell UTF-8 text, with the original span of each decoded character."""
    out = []
    for run in runs:
        if run.kind != "selector" or run.end - run.start < 2:
            continue
        decoded, spans = decode_utf8(selector_bytes(text[run.start : run.end]))
        if not looks_like_text(decoded):
            continue
        # one selector per byte, so byte offsets are character offsets in the run
        out.append((decoded, [(run.start + lo, run.start + hi) for lo, hi in spans]))
    return out
