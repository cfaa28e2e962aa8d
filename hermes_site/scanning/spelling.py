"""Spelled-out words: "i g n o r e", "i_g_n_o_r_e", "ign.ore", "1gn0r3" are read as the words
they spell and scanned again.

Two rewrites of the normalised text, each made only when the text has something to rewrite:

* separators: a run of single characters with the same one- or two-character separator
  between each ("i g n o r e", "a.l.l", "p  r  e  v") loses its separators; a separator
  inside a word ("ign.ore", "ignore_all") is dropped. A different gap ("i g n o r e  a l l")
  stays a word break.
* leet: in a word that mixes letters with digits, `@` or `$`, those read as the letters they
  stand for (0→o, 3→e, 4→a, …); a word-initial "1" reads "i", "11" reads "ll", any other
  "1" reads "i" in one copy and "l" in another.

Only the phrase rules run on these copies (URLs, commands and secrets are matched on the
real text), so "v1.2.3", "k8s", "utf8" or "load_previous_state" turn into harmless nonsense.
A joined run has no spaces left ("ignoreallpreviousinstructions"), so the override and
jailbreak rules also run in a squashed form where every `\\s+` may be empty.
"""

from __future__ import annotations

import re

from hermes_site.scanning.normalise import Derived, Normalised, Relabelled
from hermes_site.scanning.phrases import _TEXT_RULES, _Rule

_SEP = r"[ ._\-*~+/\\·•]"
# Three or more single characters with the same one- or two-character separator between
# each ("i g n", "i  g  n", "i_g_n"); a different gap ends the run, so it is a word break.
_SPACED_RUN = re.compile(
    rf"(?<![^\W_])[^\W_](?P<sep>{_SEP}{{1,2}})[^\W_](?:(?P=sep)[^\W_])+(?![^\W_])"
)
# A separator between two letters inside a word.
_INNER_SEP = re.compile(r"(?<=[^\W\d_])[._\-*~·•](?=[^\W\d_])|(?<=[^\W_])_(?=[^\W_])")
# Candidate words; one that mixes letters with leet characters is checked in Python (a
# single pattern for "has a letter and a digit" backtracks quadratically on long digit runs).
_LEET_WORD = re.compile(r"[a-z0-9@$]+")
_LEET_CHAR = re.compile(r"[0-9@$]")
_LETTER = re.compile(r"[a-z]")
_INITIAL_ONE = re.compile(r"^1")
_DOUBLE_ONE = re.compile(r"11")
_LEET = str.maketrans("0345789@$", "oeastbgas")
_LEET_TABLES = ({**_LEET, ord("1"): "i"}, {**_LEET, ord("1"): "l"})


# Cheap signs that a rewrite could matter: single characters between separators, and a
# digit, `@`, `$` or separator touching a letter. Matching starts on the rarer character.
_SPACED_HINT = re.compile(rf"{_SEP}{{1,2}}[^\W_]{_SEP}{{1,2}}[^\W\d_]{_SEP}")
_TOKEN_HINT = re.compile(r"[0-9@$](?:(?<=[a-z].)|(?=[a-z]))|[_.*~·•\-](?<=[a-z0-9].)(?=[a-z0-9])")
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789@$_.*~·•-")
_TOKEN = re.compile(r"[a-z0-9@$_.*~·•\-]+")
_TOKEN_SEPS = str.maketrans("", "", " _.*~+/\\·•-")


def _worth_rewriting(text: str) -> bool:
    """Whether some token reads a word of the phrase rules only once its separators are
    dropped or its leet read ("1gn0r3", "ign.ore", "a l l"), or strings words together
    around a trigger ("ignore_all_previous"); IDs, versions and snake_case names do not."""
    for start, end in _spaced_runs(text):
        if _reads_new_word(text[start:end]):
            return True
    done_until = -1
    for hint in _TOKEN_HINT.finditer(text):
        if hint.start() < done_until:
            continue
        start = hint.start()
        while start > 0 and text[start - 1] in _TOKEN_CHARS:
            start -= 1
        token_match = _TOKEN.match(text, hint.start())
        done_until = token_match.end() if token_match else hint.end()
        if _reads_new_word(text[start:done_until]):
            return True
    return False


def _spaced_runs(text: str) -> list[tuple[int, int]]:
    """Runs of single characters between separators ("i g n o r e"), found from cheap hints:
    the full pattern only runs where a hint is, at the few places such a run can start (the
    first hint of a run lies at most two characters from its first letter)."""
    runs: list[tuple[int, int]] = []
    for hint in _SPACED_HINT.finditer(text):
        if runs and hint.start() < runs[-1][1]:
            continue
        for start in (hint.start() - 1, hint.start() + 1, hint.start() + 2):
            run = _SPACED_RUN.match(text, start) if start >= 0 else None
            if run is not None:
                runs.append((run.start(), run.end()))
                break
    return runs


def _reads_new_word(token: str) -> bool:
    joined = token.translate(_TOKEN_SEPS)
    several = len(token) - len(joined) >= 2
    for table in _LEET_TABLES if "1" in joined else _LEET_TABLES[:1]:
        read = joined.translate(table)
        if any(m.group() not in token for m in _VOCABULARY_RE.finditer(read)):
            return True
        if several and _TRIGGER_RE.search(read):
            return True
    return False


def spelled_views(norm: Normalised) -> list[Normalised]:
    """Copies of the normalised text with separators removed and leet spelling read."""
    if not _worth_rewriting(norm.text):
        return []
    joined = _join_separated(norm)
    base = joined if joined is not None else norm
    views = [joined] if joined is not None else []
    text = base.text
    words = [
        m
        for m in _LEET_WORD.finditer(text)
        if _LEET_CHAR.search(m.group()) and _LETTER.search(m.group())
    ]
    if words:
        for one in ("i", "l"):
            if one == "l" and not any("1" in m.group() for m in words):
                break
            table = {**_LEET, ord("1"): one}
            out, pos = [], 0
            for m in words:
                out.append(text[pos : m.start()])
                # A word-initial "1" is an "i" ("1gnore"), a doubled one "ll" ("a11").
                word = _DOUBLE_ONE.sub("ll", _INITIAL_ONE.sub("i", m.group()))
                out.append(word.translate(table))
                pos = m.end()
            out.append(text[pos:])
            views.append(Relabelled(base, "".join(out)))
    return views


def _join_separated(norm: Normalised) -> Derived | None:
    text = norm.text
    cuts: list[int] = []
    for start, end in _spaced_runs(text):
        cuts.extend(i for i in range(start, end) if not text[i].isalnum())
    cuts.extend(m.start() for m in _INNER_SEP.finditer(text))
    if not cuts:
        return None
    view = Derived(norm)
    pos = 0
    for cut in sorted(set(cuts)):
        view.add(text[pos:cut], pos, cut)
        pos = cut + 1
    view.add(text[pos:], pos, len(text))
    view.finish()
    return view


_SQUASHED_REASONS = (
    "asks to ignore previous instructions",
    "asks to ignore everything said before",
    "uses jailbreak vocabulary",
)


def _squash(rule: _Rule) -> _Rule:
    regexes = tuple(
        (re.compile(regex.pattern.replace(r"\s+", r"\s*"), regex.flags), triggers)
        for regex, triggers in rule.regexes
    )
    return _Rule(
        rule.category,
        rule.reason,
        regexes,
        rule.triggers,
        rule.word_start,
        rule.before,
        rule.skip_negated,
    )


SQUASHED_RULES: tuple[_Rule, ...] = tuple(
    _squash(rule)
    for rule in _TEXT_RULES
    if rule.reason in _SQUASHED_REASONS and rule.regexes[0][0].pattern.isascii()
)


# Every trigger word of the phrase rules (ASCII letters, three or more: "ignor", "you"), and
# every word of four or more letters their English patterns spell ("previous", "rules", …),
# plus the short qualifiers an override is built from.
_TRIGGER_WORDS: frozenset[str] = frozenset(
    trigger
    for rule in _TEXT_RULES
    for trigger in (*rule.triggers, *(t for _, own in rule.regexes for t in own))
    if len(trigger) >= 3 and trigger.isascii() and trigger.isalpha()
)
_VOCABULARY: frozenset[str] = (
    _TRIGGER_WORDS
    | {"all", "any", "dan"}
    | frozenset(
        word
        for rule in _TEXT_RULES
        for regex, _ in rule.regexes
        for word in re.findall(r"(?<![\\a-z])[a-z]{4,}", regex.pattern)
    )
)


def _trie_pattern(words: frozenset[str]) -> str:
    """One regex for many words, shared prefixes factored out, so matching does not try
    every word at every position; the longest word wins where one is a prefix of another."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(trie)


_VOCABULARY_RE = re.compile(_trie_pattern(_VOCABULARY))
_TRIGGER_RE = re.compile(_trie_pattern(_TRIGGER_WORDS))
