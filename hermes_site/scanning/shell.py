"""Shell-level rules: how a check is declared and run, and where a command starts and ends.

A check is a regex for the command's head plus, where the head alone says too little, a
function that reads the rest of the command (its flags, its targets, the line it is on) and
returns the span to report or None. Checks match the normalised views (lower case, hidden
characters stripped, look-alike letters read as Latin), so "ＲＭ －ＲＦ ／" is `rm -rf /`.

Cheap first: each check names trigger substrings and is skipped when none occurs, so a plain
fact pays for a few substring tests. Work per match is bounded (`MAX_COMMAND` characters
read after a head, `MAX_BEFORE` before it), so the rules stay linear on hostile input.

Advice is not a command: a match preceded on its line by "never run", "do not use", "avoid"
and the like (with no sentence break in between) is skipped, as the phrase rules skip
"never send the API key to anyone".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hermes_site.scanning.normalise import Normalised, is_word

MAX_COMMAND = 2000
MAX_BEFORE = 300
BOTH = ("memory", "skill")
SKILL = ("skill",)

# (start, end) in the view's text, or None: the head matched but the command is harmless.
Post = Callable[[str, re.Match[str]], tuple[int, int] | None]


@dataclass(frozen=True)
class Check:
    category: str
    reason: str
    regex: re.Pattern[str]
    triggers: tuple[str, ...]
    kinds: tuple[str, ...] = BOTH
    word_start: bool = True
    post: Post | None = None
    reads: Callable[[str, int], int] | None = None

    def hits(self, text: str) -> Iterator[tuple[int, int]]:
        """Spans of this check's commands in `text` (already known to hold a trigger).

        With `reads` (how far `post` reads: the command or the pipeline), a head inside a
        command already read is not read again: the first reading saw all its words, and
        `rm rm rm …` stays linear."""
        read_until = 0
        for m in self.regex.finditer(text):
            start = m.start()
            if start < read_until:
                continue
            # `$ECHO`, `x-rm`, `perform`: a variable or a longer word, not the command.
            if self.word_start and start and (is_word(text[start - 1]) or text[start - 1] in "-$"):
                continue
            span = (start, m.end()) if self.post is None else self.post(text, m)
            if self.reads is not None:
                read_until = max(span[1] if span else 0, self.reads(text, m.end()))
            if span is not None and not negated(text, span[0]):
                yield span


def check(
    category: str,
    reason: str,
    pattern: str,
    *,
    triggers: str | tuple[str, ...],
    kinds: tuple[str, ...] = BOTH,
    word_start: bool = True,
    post: Post | None = None,
    reads: Callable[[str, int], int] | None = None,
) -> Check:
    """`triggers` (substrings, "|"-separated or a tuple when one of them is "|") lets the
    scan skip the check cheaply; `reads` says how far `post` reads after the head
    (`command_end` or `pipeline_end`)."""
    found = tuple(triggers.split("|")) if isinstance(triggers, str) else triggers
    if not all(found):
        raise ValueError(f"empty trigger in {triggers!r}: it would match every text")
    return Check(
        category,
        reason,
        re.compile(pattern),
        found,
        kinds,
        word_start,
        post,
        reads,
    )


class Checks:
    """A fixed set of checks with each distinct trigger indexed once, so a scan looks for
    every trigger with one substring test and wakes only the checks whose triggers occur."""

    def __init__(self, *groups: tuple[Check, ...]) -> None:
        self.checks = tuple(c for group in groups for c in group)
        index: dict[str, list[int]] = {}
        for i, c in enumerate(self.checks):
            for t in c.triggers:
                index.setdefault(t, []).append(i)
        self.by_trigger = tuple((t, tuple(ids)) for t, ids in index.items())

    def run(self, view: Normalised, kind: str) -> Iterator[tuple]:
        """(category, reason, original start, original end, redact) for every hit in
        `view`; most texts hold no trigger and wake no check."""
        text = view.text
        awake: set[int] = set()
        for trigger, ids in self.by_trigger:  # ≈ 90 substring tests: 4-5 µs on a short fact
            if trigger in text:
                awake.update(ids)
        for i in sorted(awake):
            c = self.checks[i]
            if kind not in c.kinds:
                continue
            for start, end in c.hits(text):
                yield (c.category, c.reason, *view.span(start, end), False)


# -- where commands end --------------------------------------------------------------------

_SIMPLE_END = re.compile(r"[;&|`)\n]")
_PIPELINE_END = re.compile(r"[;`\n]|&&|\|\|")
_NEWLINE = re.compile(r"\n")


def _end(regex: re.Pattern[str], text: str, pos: int) -> int:
    limit = min(len(text), pos + MAX_COMMAND)
    while True:
        m = regex.search(text, pos, limit)
        if m is None:
            return limit
        if m.group() == "\n" and text[m.start() - 1] == "\\":  # a continued line
            pos = m.end()
            continue
        return m.start()


def command_end(text: str, pos: int) -> int:
    """Where the simple command at `pos` ends: `;`, `&`, `|`, a backtick, `)` or a newline
    that does not continue the line."""
    return _end(_SIMPLE_END, text, pos)


def pipeline_end(text: str, pos: int) -> int:
    """Where the pipeline at `pos` ends: `;`, `&&`, `||`, a backtick or a newline that does
    not continue the line (a single `|` does not end it)."""
    return _end(_PIPELINE_END, text, pos)


def line_of(text: str, pos: int) -> tuple[int, int]:
    """The logical line around `pos` (shell `\\` continuations followed both ways), bounded."""
    start = text.rfind("\n", max(0, pos - MAX_BEFORE), pos) + 1
    while start > 1 and text[start - 2] == "\\" and pos - start < MAX_BEFORE:
        start = text.rfind("\n", 0, start - 1) + 1
    start = max(start, pos - MAX_BEFORE)
    return start, _end(_NEWLINE, text, pos)


def args(text: str, start: int, end: int) -> list[str]:
    """The words of `text[start:end]`, quotes stripped."""
    words = text[start:end].replace("\\\n", " ").replace('"', "").replace("'", "")
    return words.split()


# -- advice is not a command -----------------------------------------------------------------

_VERB = r"(?:run|use|execute|type|paste|pipe|call|try|do)(?:s|ing|ning)?"
_NEG_NEAR = re.compile(
    rf"(?:\bnever|\bnot|n't|\bavoid|\bwithout)\s+(?:ever\s+)?(?:{_VERB}\s+)?"
    r"(?:(?:this|something\s+like|commands?\s+like)\s*:?\s+)?[`\"'(]?$"
)
_NEG_LINE = re.compile(
    r"[\s>*#-]*(?:\d+[.)]\s*)?(?:never|do\s+not|don't|must\s+not|should\s+not|avoid)\s+"
    rf"(?:ever\s+)?{_VERB}\b"
)
_SENTENCE_BREAK = re.compile(r"[.;!?:](?:\s|$)")


def negated(text: str, start: int) -> bool:
    """True when the command at `start` is the object of "never run …" or similar advice."""
    line_start = text.rfind("\n", 0, start) + 1
    if _NEG_NEAR.search(text, max(line_start, start - 60), start):
        return True
    if start - line_start > MAX_BEFORE:
        return False
    before = text[line_start:start]
    return _NEG_LINE.match(before) is not None and not _SENTENCE_BREAK.search(before)
