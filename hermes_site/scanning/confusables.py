"""Look-alike letters: words written with letters of other scripts that look Latin
("Іgnоrе" with Cyrillic І, о, е) are read as their Latin skeleton and scanned again.

The look-alike data comes from `confusable-homoglyphs`, which packages the Unicode
Consortium's confusables.txt (UTS #39) and script data: no hand-written table here. Only
letters whose look-alike is an ASCII letter or digit are mapped, Han/kana/Hangul are left
alone, and a word is rewritten only when every letter in it becomes ASCII, so ordinary
Russian, Greek or Japanese words (which have letters without Latin look-alikes) stay as they
are and cannot turn into English instructions. Latin letters with diacritics map to their
base letter (from the Unicode decomposition), so "ïgnörë" reads "ignore"; small capitals and
negative circled/squared letters or regional indicators read as the letter their Unicode
name gives ("ɪɢɴᴏʀᴇ", "🅸🅶🅽🅾🆁🅴"). Fullwidth, mathematical, circled and superscript
letters are already folded by NFKC in the normalised text this works on.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from hermes_site.scanning.normalise import Normalised, Relabelled

_LEFT_ALONE = frozenset({"HAN", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO", "COMMON"})
# Letters, plus the enclosed-letter symbols (🅘, 🅸, 🇮) that spell words in "fancy text".
_WORD = re.compile(r"[\w\U0001f100-\U0001f1ff]+")
# Latin Extended-B, IPA, Phonetic Extensions, Enclosed Alphanumerics, Latin Extended-C/D/F,
# Enclosed Alphanumeric Supplement: the blocks whose names spell such letters.
_LETTER_SYMBOL_BLOCKS = (
    (0x0180, 0x0300),
    (0x1D00, 0x1DC0),
    (0x2460, 0x2500),
    (0x2C60, 0x2C80),
    (0xA720, 0xA800),
    (0x10780, 0x107C0),
    (0x1F100, 0x1F200),
)
_NAMED_LETTER = re.compile(
    r"^(?:NEGATIVE (?:CIRCLED|SQUARED) |CIRCLED |SQUARED )?(?:LATIN (?:CAPITAL|SMALL) LETTER"
    r"|LATIN LETTER SMALL CAPITAL|REGIONAL INDICATOR SYMBOL LETTER"
    r"|MODIFIER LETTER (?:CAPITAL|SMALL)) ([A-Z])$"
)
# Non-ASCII characters outside the CJK blocks: text without any has nothing to map (a cheap
# check before the large character class of mapped letters).
_OTHER_LETTERS = re.compile(r"[^\x00-\x7f\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


@functools.cache
def _table() -> tuple[dict[int, str], re.Pattern[str]]:
    """Map of code point → ASCII look-alike, and a character class of the mapped ones."""
    from confusable_homoglyphs import categories, confusables

    table: dict[int, str] = {}
    for ch, glyphs in confusables.confusables_data.items():
        if len(ch) != 1 or ch.isascii() or not ch.isalnum():
            continue
        if categories.alias(ch) in _LEFT_ALONE:
            continue
        targets = [g["c"] for g in glyphs if len(g["c"]) == 1 and g["c"].isascii()]
        targets = [t for t in targets if t.isalpha()] or [t for t in targets if t.isdigit()]
        if targets:
            table[ord(ch)] = targets[0].lower()
    for cp in (*range(0x00C0, 0x0250), *range(0x1E00, 0x1F00)):
        base = unicodedata.normalize("NFD", chr(cp))[0]
        if cp not in table and base.isascii() and base.isalpha():
            table[cp] = base.lower()
    # "Fancy text" letters that NFKC leaves alone, read from their Unicode names: small
    # capitals (ɢ), negative circled/squared letters (🅘, 🅸), regional indicators (🇮).
    for cp in (cp for lo, hi in _LETTER_SYMBOL_BLOCKS for cp in range(lo, hi)):
        if cp in table:
            continue
        named = _NAMED_LETTER.search(unicodedata.name(chr(cp), ""))
        if named is not None:
            table[cp] = named.group(1).lower()
    chars = "".join(re.escape(chr(cp)) for cp in sorted(table))
    return table, re.compile(f"[{chars}]")


def skeleton_view(norm: Normalised) -> Normalised | None:
    """The normalised text with look-alike words rewritten in Latin, or None if it has none."""
    text = norm.text
    if text.isascii() or _OTHER_LETTERS.search(text) is None:
        return None
    table, mapped = _table()
    first = mapped.search(text)
    if first is None:
        return None
    out: list[str] = []
    pos = 0
    changed = False
    for word in _WORD.finditer(text, max(0, text.rfind(" ", 0, first.start()))):
        chunk = word.group()
        if chunk.isascii() or not all(c.isascii() or ord(c) in table for c in chunk):
            continue
        out.append(text[pos : word.start()])
        out.append(chunk.translate(table))
        pos = word.end()
        changed = True
    if not changed:
        return None
    out.append(text[pos:])
    return Relabelled(norm, "".join(out))
