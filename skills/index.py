"""Which skills the prompt index lists, and how much of each description it shows.

* **Lines.** A description is shortened to what the skill does and when to use it
  (`index_description`): the sentences up to the first one that says when ("Use when…",
  "When Claude needs…"), or the first sentence and that one when it comes late; never more
  than DESCRIPTION_CHARS, cut at a word boundary.
* **Choice.** When not every skill fits SKILLS_INDEX_TOKENS, the index lists pinned skills
  first, then the skills the conversation is about: a BM25 score of name, category and
  description against the chat's newest user messages (the newest weighs most), plus a
  bonus for skills loaded in this chat lately. Ties go round-robin across categories, so no
  category is dropped for sorting last.
* **Stability.** The choice is kept per chat in the cache and reused while the conversation
  stays on its topic, so the system prompt is byte-identical from turn to turn (providers
  cache prompt prefixes; a prompt that changes every turn pays full price every time). It is
  chosen again when the context was compressed or reset, when the current message is
  clearly about something the listed skills do not cover, when a listed skill is gone or a
  skill was pinned or unpinned, or when a new skill fits the current message better than
  what is listed.
"""

import logging
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from django.core.cache import cache

from chats.agent.history import history_bounds
from chats.agent.tokens import count_tokens
from skills.selectors import IndexRow, index_recent_loads, index_recent_user_texts

logger = logging.getLogger(__name__)

# --- Lines -------------------------------------------------------------------------------

DESCRIPTION_CHARS = 300  # the most of a description one line shows (≈ 60–75 tokens; see _width)
ENOUGH_CHARS = 80  # a shorter description is shown whole; a shown part grows to this
HEAD_CHARS = 60  # the least of "what it does" kept when "when to use" comes late

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
_CJK_CHAR = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\uff60]")
# A sentence that says when to load the skill: it starts with "When…", "Use…", "For…",
# "If…", or says "use (this) when/for/if", "when to use", "triggers on"; 用于/适用/当.
_WHEN = re.compile(
    r"^(?:when|whenever|use|used|useful|for|if|trigger)\b"
    r"|\buse (?:it |this |this skill |me )?(?:when|whenever|for|if|to)\b"
    r"|\bwhen to use\b|\btrigger(?:s|ed)? (?:on|when|by|for)\b"
    r"|用于|适用|当",
    re.IGNORECASE,
)
_WEAK_WHEN = re.compile(r"\b(?:when|whenever|if)\b", re.IGNORECASE)


def _width(text: str) -> int:
    """Characters, a Chinese or Japanese one counting as four: what a line may hold is about
    tokens, and such a character costs about as much as four Latin letters."""
    return len(text) + 3 * len(_CJK_CHAR.findall(text))


def _cut(text: str, limit: int) -> str:
    """`text` in at most `limit` of width, cut at a word boundary with "…"."""
    if _width(text) <= limit:
        return text
    end = used = 0
    while end < len(text):
        used += 4 if _CJK_CHAR.match(text[end]) else 1
        if used > limit - 1:
            break
        end += 1
    cut = text[:end]
    space = cut.rfind(" ")
    if space > len(cut) // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-–—") + "…"


def _join(sentences: Sequence[str]) -> str:
    """Sentences back into one text: a space after Latin punctuation, none after 。！？."""
    text = ""
    for sentence in sentences:
        text += sentence if not text or text[-1] in "。！？" else f" {sentence}"
    return text


@lru_cache(maxsize=16_384)  # the same descriptions come back every turn
def index_description(description: str) -> str:
    """The part of `description` the index shows: at most DESCRIPTION_CHARS of width that
    keep the sentence saying when to use the skill, whole when it is short."""
    text = " ".join(description.split())
    if _width(text) <= ENOUGH_CHARS:
        return text
    sentences = [s for s in _SENTENCE_END.split(text) if s]
    when = next((i for i, s in enumerate(sentences) if _WHEN.search(s)), None)
    if when is None:
        when = next((i for i, s in enumerate(sentences) if _WEAK_WHEN.search(s)), 0)
    shown = _join(sentences[: when + 1])
    if _width(shown) > DESCRIPTION_CHARS and when > 0:
        # "When to use" comes late: the first sentence (what it does), then that one.
        gap = " … " if when > 1 else " "
        cue = sentences[when]
        room = max(DESCRIPTION_CHARS - _width(cue) - len(gap), HEAD_CHARS)
        shown = _cut(sentences[0], room) + gap + cue
    following = when + 1
    while _width(shown) < ENOUGH_CHARS and following < len(sentences):
        shown = _join([shown, sentences[following]])
        following += 1
    return _cut(shown, DESCRIPTION_CHARS)


TOOLS_MISSING = " (some of its tools are not on in this chat: skill_view says which)"


def index_line(row: IndexRow) -> str:
    where = f" [{row.category}]" if row.category else ""
    missing = TOOLS_MISSING if row.tools_missing else ""
    return f"- {row.slug}{where}: {index_description(row.description)}{missing}"


def pointer_line(left_out: int) -> str:
    return f"- … and {left_out} more: call skills_list (by category or query) to see them."


@lru_cache(maxsize=16_384)
def line_tokens(line: str) -> int:
    """Tokens of one line of the index with its newline (lines repeat from turn to turn)."""
    return count_tokens(line) + 1


# --- Relevance ---------------------------------------------------------------------------

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_STOPWORDS = frozenset(
    """\
    a about after again all also am an and any are as at be been before but by can could
    did do does doing done for from get got had has have how i if in into is it its just
    let lets like make me more my need no not now of ok okay on or our please should so
    some than thank thanks that the their them then there these they this those to up us
    use used using want was we were what when where which who why will with would yes you
    your hi hello hey
    """.split()  # noqa: SIM905 - a list literal of 100 words is harder to read
)
K1, B = 1.2, 0.75  # BM25's usual term saturation and length normalisation
NAME_WEIGHT = 2  # a word of the name or category counts like two of the description


def _stem(word: str) -> str:
    """A light English stemmer: "locks", "locked", "locking" and "lock" are one term."""
    if len(word) > 4 and word.endswith(("ies", "ied")):
        word = word[:-3] + "y"
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


@lru_cache(maxsize=16_384)
def _terms(text: str) -> tuple[str, ...]:
    """Search terms of `text`: stemmed words without stop words or bare numbers; runs of
    Chinese or Japanese characters as overlapping pairs."""
    terms = []
    for word in _WORD.findall(text.casefold()):
        if _CJK_RUN.fullmatch(word):
            terms.extend(word[i : i + 2] for i in range(max(len(word) - 1, 1)))
            continue
        if word in _STOPWORDS or word.isdigit() or len(word) < 2:
            continue
        stem = _stem(word)
        if stem not in _STOPWORDS:
            terms.append(stem)
    return tuple(terms)


@lru_cache(maxsize=16_384)
def _document(slug: str, category: str, description: str) -> tuple[dict[str, int], int]:
    """Term counts and length of one skill as the score reads it (never modified)."""
    counts: dict[str, int] = {}
    for term in _terms(description):
        counts[term] = counts.get(term, 0) + 1
    for term in _terms(f"{slug} {category}"):
        counts[term] = counts.get(term, 0) + NAME_WEIGHT
    return counts, sum(counts.values())


def conversation_query(texts: Sequence[str]) -> dict[str, float]:
    """Term weights of user messages given newest first: the newest weighs 1, earlier ones
    less; a term takes its highest weight."""
    query: dict[str, float] = {}
    for age, text in enumerate(texts):
        weight = 1 / (1 + 0.75 * age)
        for term in _terms(text or ""):
            if query.get(term, 0) < weight:
                query[term] = weight
    return query


@dataclass(frozen=True)
class _Corpus:
    """The skills as the score reads them: each one's length in terms, the average, and per
    term the skills holding it with its count."""

    lengths: list[int]
    average: float
    postings: dict[str, list[tuple[int, int]]]


_CORPORA: dict[int, _Corpus] = {}  # by the rows' contents: skills change rarely
_CORPORA_KEPT = 8  # a few audiences (team-wide, personal skills) at once


def _corpus(rows: Sequence[IndexRow]) -> _Corpus:
    key = hash(tuple((row.slug, row.category, row.description) for row in rows))
    corpus = _CORPORA.get(key)
    if corpus is None:
        lengths, postings = [], {}
        for index, row in enumerate(rows):
            counts, length = _document(row.slug, row.category, row.description)
            lengths.append(length)
            for term, count in counts.items():
                postings.setdefault(term, []).append((index, count))
        corpus = _Corpus(lengths, sum(lengths) / len(lengths) or 1.0, postings)
        if len(_CORPORA) >= _CORPORA_KEPT:
            _CORPORA.clear()
        _CORPORA[key] = corpus
    return corpus


def relevance(rows: Sequence[IndexRow], query: dict[str, float]) -> list[float]:
    """A BM25 score of each row's name, category and description against `query`."""
    scores = [0.0] * len(rows)
    if not query or not rows:
        return scores
    corpus = _corpus(rows)
    total = len(rows)
    for term, weight in query.items():
        postings = corpus.postings.get(term)
        if not postings:
            continue
        found = len(postings)
        idf = weight * math.log(1 + (total - found + 0.5) / (found + 0.5))
        for index, count in postings:
            norm = K1 * (1 - B + B * corpus.lengths[index] / corpus.average)
            scores[index] += idf * count * (K1 + 1) / (count + norm)
    return scores


# --- Choice ------------------------------------------------------------------------------

RECENT_MESSAGES = 4  # user messages the choice reads (the current one and three before)
USE_BONUS = 1.0  # a skill loaded lately in this chat ranks like one weak word match
TOP = 3  # how many of the best scores stand for "what the list covers"
SIGNAL = 2.0  # a best score below this says nothing about which skills matter
TOPIC_CHANGE = 0.5  # the list covers less than this share of the best: a new topic
NEW_SKILL_GAIN = 1.5  # a new skill this many times better than the weakest listed joins


@dataclass
class IndexChoice:
    """The rows the index lists (in the selector's order), how many it leaves out, and how
    the list came about: "all" fit, "kept" from an earlier turn, or "chosen" now (why)."""

    rows: list[IndexRow]
    left_out: int
    choice: str
    reason: str = ""

    def details(self) -> dict:
        details = {"listed": len(self.rows), "left_out": self.left_out, "choice": self.choice}
        if self.reason:
            details["reason"] = self.reason
        return details


def _fits_all(rows: Sequence[IndexRow], available: int) -> bool:
    used = 0
    for row in rows:
        used += line_tokens(index_line(row))
        if used > available:
            return False
    return True


def _pick(
    rows: Sequence[IndexRow], scores: Sequence[float], loads: dict[str, int], available: int
) -> set[str]:
    """Names of the rows to list within `available` tokens: pinned first, then by score and
    recent loads, ties round-robin across categories (rows come by category and name)."""
    rank_in_category: list[int] = []
    seen: dict[str, int] = {}
    for row in rows:
        rank_in_category.append(seen.get(row.category, 0))
        seen[row.category] = rank_in_category[-1] + 1

    def priority(index: int):
        row = rows[index]
        bonus = USE_BONUS * min(loads.get(row.slug, 0), 3) ** 0.5
        return (not row.pinned, -(scores[index] + bonus), rank_in_category[index], index)

    chosen: set[str] = set()
    used = 0
    for index in sorted(range(len(rows)), key=priority):
        cost = line_tokens(index_line(rows[index]))
        if used + cost <= available:
            chosen.add(rows[index].slug)
            used += cost
        elif available - used < 12:  # not even a short line fits any more
            break
    return chosen


def _top(scores) -> float:
    return sum(sorted(scores)[-TOP:])


def _reason_to_choose(state, rows, epoch, trigger_text, chat) -> str:
    """Why the kept list cannot serve this turn ("" when it can)."""
    if not isinstance(state, dict) or state.get("chat") != chat.created_at.isoformat():
        return "a new conversation"
    if state.get("epoch") != epoch:
        return "the context was compressed or reset"
    listed = set(state.get("slugs", ()))
    present = {row.slug for row in rows}
    if not listed <= present:
        return "a listed skill is gone"
    if state.get("pinned") != [row.slug for row in rows if row.pinned]:
        return "the pinned skills changed"
    query = conversation_query([trigger_text])
    if not query:
        return ""
    scores = relevance(rows, query)
    free = [(row, score) for row, score in zip(rows, scores, strict=True) if not row.pinned]
    best = max((score for _, score in free), default=0.0)
    if best < SIGNAL:
        return ""  # the message names nothing any skill is about
    shown = [score for row, score in free if row.slug in listed]
    if _top(shown) < TOPIC_CHANGE * _top(score for _, score in free):
        return "the topic changed"
    if state.get("known") != _fingerprint(rows):  # some skill came or went since
        known = set(_cache_get(chat, KNOWN) or ())
        weakest = min(shown, default=0.0)
        for row, score in free:
            if row.slug not in known and score >= SIGNAL and score > NEW_SKILL_GAIN * weakest:
                return "a new skill fits better"
    return ""


def _fingerprint(rows: Sequence[IndexRow]) -> int:
    """Which skills exist, in a number: the kept state stays small (read every turn) and
    the full list of names is read only when this changes."""
    return zlib.crc32("\n".join(row.slug for row in rows).encode())


KNOWN = "known"  # the second key of a chat: the names of the skills when it chose


def _cache_key(chat, part: str = "") -> str:
    return f"skills:index:{chat.pk}" + (f":{part}" if part else "")


def _cache_get(chat, part: str = ""):
    try:
        return cache.get(_cache_key(chat, part))
    except Exception:  # noqa: BLE001 - without the cache the index is chosen every turn
        logger.warning("skills index: cache unreadable, choosing anew", exc_info=True)
        return None


def _cache_set(chat, values: dict) -> None:
    try:
        cache.set_many(
            {_cache_key(chat, part): value for part, value in values.items()},
            timeout=CHOICE_TTL_SECONDS,
        )
    except Exception:  # noqa: BLE001
        logger.warning("skills index: cache unwritable", exc_info=True)


CHOICE_TTL_SECONDS = 14 * 24 * 3600  # an idle chat chooses anew after two weeks


def choose_index(rows: list[IndexRow], *, available: int, context=None) -> IndexChoice:
    """The rows the index lists within `available` tokens (besides the pointer line): all of
    them when they fit; else the choice kept for this chat while it still serves the turn,
    or a new choice by relevance to the conversation and recent loads, remembered."""
    if _fits_all(rows, available):
        return IndexChoice(list(rows), 0, "all")
    available -= line_tokens(pointer_line(len(rows)))
    chat = getattr(context, "chat", None)
    trigger = getattr(context, "trigger", None)
    if chat is None or trigger is None:
        chosen = _pick(rows, [0.0] * len(rows), {}, available)
        return _listing(rows, chosen, "chosen", "no conversation")

    epoch = getattr(context, "history_start_id", None)
    if epoch is None:  # rendered outside the context builder
        epoch = history_bounds(chat, before_id=trigger.pk).start_id
    state = _cache_get(chat)
    reason = _reason_to_choose(state, rows, epoch, trigger.text or "", chat)
    if not reason:
        listed = set(state["slugs"])
        kept = [row for row in rows if row.slug in listed]
        if sum(line_tokens(index_line(row)) for row in kept) <= available:
            return _listing(rows, listed, "kept")
        reason = "the listed skills outgrew the budget"

    earlier = index_recent_user_texts(chat, before_id=trigger.pk, limit=RECENT_MESSAGES - 1)
    scores = relevance(rows, conversation_query([trigger.text or "", *earlier]))
    chosen = _pick(rows, scores, index_recent_loads(chat), available)
    state = {
        "chat": chat.created_at.isoformat(),
        "epoch": epoch,
        "slugs": sorted(chosen),
        "pinned": [row.slug for row in rows if row.pinned],
        "known": _fingerprint(rows),
    }
    _cache_set(chat, {"": state, KNOWN: [row.slug for row in rows]})
    return _listing(rows, chosen, "chosen", reason)


def _listing(rows: Sequence[IndexRow], chosen: set[str], choice: str, reason: str = ""):
    listed = [row for row in rows if row.slug in chosen]
    return IndexChoice(listed, len(rows) - len(listed), choice, reason)
