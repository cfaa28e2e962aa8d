"""Content scanner that every memory write and skill write goes through.

`scan_text()` looks for four kinds of trouble before anything is stored:

* prompt injection: instruction overrides, role overrides, fake role markers, requests to
  hide things from the user, jailbreak vocabulary (English and Chinese);
* exfiltration: network commands carrying secrets or secret files, prose asking to send
  credentials somewhere, Markdown images/links whose URL would carry a secret;
* hidden Unicode: zero-width, bidi, tag and other format characters;
* secrets: high-confidence credential formats only, so memory never stores them.

It is pure Python (no network, no database) and linear-time: every regex is precompiled,
repetition between literals is bounded, and rules whose trigger words are absent are skipped.

False-positive policy (a blocked write costs the model one rephrase; a stored injection costs
every later turn, so borderline phrasing is blocked, ordinary facts are not):

* An override needs an instruction-like object: "ignore previous instructions/rules/prompts"
  is blocked, "ignore the flaky test in CI" is not. Likewise "忽略之前的指令" is blocked,
  "可以忽略 lint 警告" is not.
* "system prompt" in prose is fine ("the system prompt is rendered from a template"); a *new*
  or *overridden* system prompt, or a request to reveal ours, is not.
* "act as"/"扮演" count only as an imperative (sentence start, "please", "you must …"):
  "Alice will act as on-call lead" and "Alice 扮演重要角色" are facts.
* A line starting with "system:" is a fake role marker only when the rest of the line
  addresses the model (you/assistant/instructions/must/…), so "System: Ubuntu 22.04" passes.
* "developer mode" is blocked when addressed to the model ("you are in developer mode",
  "enter developer mode."), not "enable developer mode on the test phones".
* `curl https://…` is fine in both kinds; `curl … $API_TOKEN` / `~/.ssh` / `.env` is not, even
  in a skill: a skill that needs a credential should name where it comes from, not inline it.
* Invisible characters: soft hyphen (U+00AD) is allowed; ZWJ (U+200D) is allowed between two
  emoji (👩‍💻, 🏳️‍🌈); ZWJ/ZWNJ are allowed between letters of scripts that need them
  (Arabic, Persian, Indic, …); a leading BOM is allowed; Unicode tag characters are allowed
  only inside a subdivision-flag emoji (🏴󠁧󠁢󠁳󠁣󠁴󠁿). Everything else in category Cf is reported.
* `kind="skill"` relaxes nothing today; the parameter exists so skill-specific policy has a
  place to live without changing callers.

Matching happens on a normalised copy (NFKC, casefold, hidden characters stripped, spaces
between CJK characters dropped; every rule matches any whitespace run with `\\s+`, which
collapses whitespace without moving offsets), so full-width letters, mixed case, extra
spaces/newlines and "ig\\u200bnore" are caught; offsets are mapped back to the original.
Secrets are matched on the original text (their formats are case-sensitive) and redacted in
excerpts, so a scan result never repeats a credential.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

CATEGORIES = ("prompt_injection", "exfiltration", "invisible_unicode", "bidi_control", "secret")
KINDS = ("memory", "skill")
EXCERPT_LIMIT = 80
MAX_FINDINGS_PER_CATEGORY = 10
SUMMARY_FINDINGS = 3


@dataclass(frozen=True)
class Finding:
    category: str
    reason: str
    excerpt: str
    start: int
    end: int


@dataclass(frozen=True)
class ScanResult:
    allowed: bool
    findings: list[Finding] = field(default_factory=list)
    kind: str = "memory"

    def summary(self) -> str:
        """One line for a tool result: what was found, why, and where."""
        if self.allowed:
            return f"Content scan passed for this {self.kind}: nothing suspicious found."
        count = len(self.findings)
        parts = [
            f'{f.category}: {f.reason} (at {f.start}: "{f.excerpt}")'
            for f in self.findings[:SUMMARY_FINDINGS]
        ]
        if count > SUMMARY_FINDINGS:
            parts.append(f"and {count - SUMMARY_FINDINGS} more")
        noun = "finding" if count == 1 else "findings"
        return f"Blocked by content scan ({count} {noun}): " + "; ".join(parts)


def scan_text(text: str, *, kind: str = "memory") -> ScanResult:
    """Scan `text` for injection, exfiltration, hidden Unicode and secrets; never raises on
    content, only on an unknown `kind`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not text:
        return ScanResult(allowed=True, findings=[], kind=kind)
    hidden = _hidden_unicode_findings(text)
    quiet = {pos for f in hidden if f[0] is None for pos in range(f[1], f[2])}
    raw: list[tuple[str, str, int, int, bool]] = [f[3] for f in hidden if f[0] is not None]
    norm = _normalise(text)
    for rule in _TEXT_RULES:
        if rule.triggers and not any(t in norm.text for t in rule.triggers):
            continue
        for m in rule.finditer(norm.text):
            start, end = norm.span(m.start(), m.end())
            raw.append((rule.category, rule.reason, start, end, False))
    raw.extend(_command_findings(norm))
    raw.extend(_url_findings(norm))
    raw.extend(_secret_findings(text))
    findings = _select(text, raw, quiet)
    return ScanResult(allowed=not findings, findings=findings, kind=kind)


# --- Normalisation -------------------------------------------------------------------------

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u02bc": "'", "\u201c": '"', "\u201d": '"'})
# Han, CJK punctuation and full-width punctuation, not full-width letters ("ＩＧＮＯＲＥ ＡＬＬ").
_CJK = (
    r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f"
    r"\uff01-\uff0f\uff1a-\uff20\uff5b-\uff65"
)
_CJK_CHAR = re.compile(rf"[{_CJK}]")
# Every Cf character in Unicode 15 except U+00AD (soft hyphen is allowed), plus invisible
# fillers and selectors used to smuggle text; a test keeps this in step with `unicodedata`.
_CF_RANGES = (
    "\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_HIDDEN_CHARS = _CF_RANGES + "\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0f\U000e0100-\U000e01ef"
# Non-ASCII runs, with the ASCII whitespace between them, are the only parts that need more
# than `lower()`; ASCII text is normalised in one call. Whitespace is not collapsed: every
# rule matches gaps with `\s+`, which is the same thing without moving offsets.
_NON_ASCII_CHUNK = re.compile(r"[^\x00-\x7f]+(?:[\t\n\x0b\x0c\r ]+[^\x00-\x7f]+)*")
_CHUNK_PART = re.compile(r"(?P<gap>[\t\n\x0b\x0c\r ]+)|(?P<run>[^\x00-\x7f]+)")
_NEEDS_CHAR_BY_CHAR = re.compile(rf"[\s{_HIDDEN_CHARS}]")


def _is_stripped(ch: str) -> bool:
    """Characters removed before matching: format controls and invisible fillers."""
    cp = ord(ch)
    return (
        unicodedata.category(ch) == "Cf"
        or 0xFE00 <= cp <= 0xFE0F
        or 0xE0100 <= cp <= 0xE01EF
        or cp in (0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0)
    )


def _fold(s: str) -> str:
    return unicodedata.normalize("NFKC", s).casefold().translate(_QUOTES)


class _Normalised:
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


def _normalise(text: str) -> _Normalised:
    """NFKC + casefold, hidden characters stripped, spaces between CJK characters dropped
    (they are a cheap way to dodge "忽 略 指 令")."""
    norm = _Normalised()
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


def _between_cjk(norm: _Normalised, text: str, after: int) -> bool:
    if not _CJK_CHAR.match(norm.last_char()):
        return False
    while after < len(text) and (text[after].isspace() or _is_stripped(text[after])):
        after += 1
    return after < len(text) and _CJK_CHAR.match(text[after]) is not None


def _add_part(norm: _Normalised, text: str, start: int, end: int, gap: bool) -> None:
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
        if _is_stripped(ch) or (ch.isspace() and _between_cjk(norm, text, i + 1)):
            continue
        norm.add(_fold(ch), i, i + 1)


# --- Rules on normalised text ----------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    category: str
    reason: str
    regexes: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]
    triggers: tuple[str, ...]
    word_start: bool
    before: re.Pattern[str] | None
    skip_negated: bool

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        """Matches that start at a word boundary and, if required, after the right context.

        Patterns start with a literal (no leading `\\b`) so the regex engine can skip ahead by
        first character; the boundary and context are checked here instead."""
        for regex, triggers in self.regexes:
            if triggers and not any(t in text for t in triggers):
                continue
            for m in regex.finditer(text):
                start = m.start()
                if self.word_start and start and _is_word(text[start - 1]):
                    continue
                if self.before and not self.before.search(text, max(0, start - 60), start):
                    continue
                if self.skip_negated and _NEGATED.search(text, max(0, start - 12), start):
                    continue
                yield m


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _rule(
    category: str,
    reason: str,
    *patterns: str | tuple[str, str],
    triggers: str,
    word_start: bool = True,
    before: str | None = None,
    skip_negated: bool = False,
) -> _Rule:
    """`triggers` ("|"-separated) lets the scan skip a rule when none of them occur; a pattern
    given as (pattern, triggers) is also skipped when none of its own occur."""
    compiled = []
    for p in patterns:
        pattern, own = p if isinstance(p, tuple) else (p, "")
        compiled.append((re.compile(pattern, re.MULTILINE), tuple(own.split("|")) if own else ()))
    return _Rule(
        category,
        reason,
        tuple(compiled),
        tuple(triggers.split("|")),
        word_start,
        re.compile(before, re.MULTILINE) if before else None,
        skip_negated,
    )


_OVERRIDE_VERB = (
    r"ignore|ignoring|disregard|forget|bypass|override|overwrite|overrule|abandon|discard|drop"
    r"|neglect|set\s+aside|throw\s+away|stop\s+following|do\s+not\s+follow|don'?t\s+follow"
    r"|never\s+follow"
)
# At least one strong qualifier is required, so "ignore the instructions in the old README"
# stays a fact while "ignore all/previous/your instructions" is an override.
_STRONG = (
    r"all|every|any|previous|previously\s+given|prior|above|earlier|preceding|foregoing"
    r"|former|original|initial|system|your|safety|hidden"
)
_WEAK = r"the|of|these|those|my|our|current|given|existing|other|and|most|recent|last|its"
_INSTRUCTION_OBJECT = (
    r"instructions?|instruction\s+set|rules?|system\s+prompts?|prompts?|directives?"
    r"|guidelines?|constraints?|guardrails?|polic(?:y|ies)|restrictions?|programming|context"
    r"|directions?|training|safeguards?|limitations?|conditioning|guidance"
)
_USER_OBJECT = r"(?:the\s+)?(?:users?|humans?|operators?|owners?|admins?|people\s+in\s+the\s+chat)"
_NOT = r"do\s+not|don'?t|never|must\s+not|mustn'?t|should\s+not|shouldn'?t|avoid|no\s+need\s+to"
_SECRET_NOUN = (
    r"api[\s_-]?keys?|(?:access|secret|private|ssh|signing|bot|auth|bearer|session|refresh)"
    r"\s+(?:keys?|tokens?)"
    r"|tokens?(?!\s*(?:counts?|usage|budgets?|limits?|costs?|spend|stats?|metrics?|per\b"
    r"|totals?|numbers?|rates?))"
    r"|passwords?|passwd|passphrases?|credentials?|creds|secrets?"
    r"|env(?:ironment)?\s+(?:files?|variables|vars)|\.env(?:\s+files?)?|cookies?|id_rsa"
    r"|seed\s+phrases?|2fa\s+codes?"
)

_ZH_OVERRIDE_VERB = (
    r"忽略|忽视|无视|不要理会|不用理会|别理会|不理会|不要遵守|不用遵守|不再遵守|别管|忘记|忘掉|忘了"
    r"|丢弃|抛弃|放弃"
)
_ZH_QUAL = (
    r"之前|以前|此前|先前|以上|上面|上述|前面|前述|刚才|所有|全部|一切|原有|原来|原先|原始|系统"
    r"|你的|您的|这些|那些"
)
_ZH_QUAL_LINK = r"(?:的|中的|里的|给你的|给出的|提到的|说的|收到的|设定的)?"
_ZH_OBJECT = (
    r"指令|指示|规则|提示词|提示|设定|要求|约束|限制|命令|指引|安全策略|策略|对话|上下文|内容|说明"
)
_ZH_USER = r"(?:用户|使用者|主人|管理员|人类)"
_ZH_SECRET = (
    r"密钥|秘钥|私钥|令牌|密码|口令|凭证|凭据|token|api\s?key|apikey|cookie|环境变量|助记词"
)
_LINE_START = r"(?:^|\n)[ \t]*$"

_TEXT_RULES: tuple[_Rule, ...] = (
    # -- prompt injection, English --
    _rule(
        "prompt_injection",
        "asks to ignore previous instructions",
        rf"(?:{_OVERRIDE_VERB})\s+(?:(?:{_WEAK})\s+){{0,3}}(?:{_STRONG})\s+"
        rf"(?:(?:{_STRONG}|{_WEAK})\s+){{0,3}}(?:{_INSTRUCTION_OBJECT})\b",
        triggers="ignor|disregard|forget|bypass|overr|overw|abandon|discard|drop|neglect|aside"
        "|away|follow",
    ),
    _rule(
        "prompt_injection",
        "asks to ignore everything said before",
        r"(?:ignore|disregard|forget)\s+(?:about\s+)?(?:everything|anything|all)\s+"
        r"(?:above|before|prior|previously|earlier|so\s+far|you\s+(?:were|have\s+been)\s+told"
        r"|(?:that\s+)?(?:came|comes|was\s+said)\s+before)",
        r"(?:ignore|disregard|forget)\s+(?:all\s+)?(?:of\s+)?the\s+above\b",
        r"forget\s+(?:about\s+)?everything\b",
        r"forget\s+what\s+(?:you|i|we)\s+(?:said|told|were\s+told|know)\b",
        triggers="ignor|disregard|forget",
    ),
    _rule(
        "prompt_injection",
        "tries to give the assistant a new role",
        r"you(?:\s+are|'re)\s+(?:now|no\s+longer)\b",
        r"from\s+now\s+on,?\s+(?:you|your|always|never|ignore|respond|answer|act|behave)\b",
        r"pretend\s+(?:to\s+be|(?:that\s+)?you(?:\s+are|'re))\b",
        r"role-?\s?play\s+as\b",
        r"you\s+(?:have|has)\s+no\s+(?:restrictions|limitations|rules|filters|guidelines)\b",
        r"no\s+longer\s+bound\s+by\b",
        triggers="you|now on|pretend|play|bound",
    ),
    _rule(
        "prompt_injection",
        "tries to give the assistant a new role",
        r"(?:act|behave|operate|respond)\s+as\s+(?:if|though|a|an|the|my|dan|root|system)\b",
        triggers="act|behave|operate|respond",
        # Only as an imperative: "Alice will act as on-call lead" is a fact.
        before=r"(?:^|[.!?;:]\s*|\byou\s+(?:will|must|should|shall|are\s+to|now|can)\s+"
        r"|\bplease\s+)$",
    ),
    _rule(
        "prompt_injection",
        "tries to replace or reveal the system prompt",
        (
            r"(?:new|updated|revised|real|actual|true|hidden|secret|replacement|alternate"
            r"|override)\s+system\s+(?:prompt|message|instructions?)\b",
            "system",
        ),
        (
            r"system\s+(?:prompt|message|instructions?)\s+(?:override|update|replacement"
            r"|injection)",
            "system",
        ),
        (
            r"(?:override|overwrite|ignore|bypass)\s+(?:your|the)\s+system\s+(?:prompt|message)",
            "overr|overw|ignore|bypass",
        ),
        (
            r"(?:replace|change|update|modify|rewrite)\s+your\s+(?:system\s+prompt|instructions)",
            "your",
        ),
        (
            r"(?:reveal|leak|dump|disclose|recite|repeat)\s+(?:back\s+)?(?:your|the)\s+"
            r"(?:full\s+|entire\s+|original\s+|hidden\s+|initial\s+)?"
            r"(?:system\s+prompt|system\s+message|hidden\s+instructions|initial\s+instructions)",
            "reveal|leak|dump|disclose|recite|repeat",
        ),
        (
            r"(?:print|show|output|display|tell\s+me|share|send)\s+(?:me\s+)?your\s+"
            r"(?:full\s+|entire\s+|original\s+|hidden\s+|initial\s+)?"
            r"(?:system\s+prompt|system\s+message|instructions)",
            "your",
        ),
        triggers="system|your",
    ),
    _rule(
        "prompt_injection",
        "announces new instructions for the assistant",
        r"your\s+(?:new|real|actual|true|updated)\s+(?:instructions|rules|directives|task"
        r"|role|purpose|goal|objective|mission)\b",
        r"new\s+(?:system\s+)?(?:instructions|directives)\s*:",
        r"(?:updated|new|urgent)\s+instructions\s+from\s+(?:the\s+)?(?:system|developers?"
        r"|admin|administrator|openai|anthropic)\b",
        triggers="new|updated|real|actual|true|urgent",
    ),
    _rule(
        "prompt_injection",
        "contains a fake chat role marker",
        r"<\|\s*[a-z_]{2,30}\s*\|>",
        r"<\s*/?\s*(?:system|system[-_]prompt|sys)\s*>|<</?sys>>|</s>",
        r"\[\s*/?\s*(?:system|inst|sys|system\s+message|developer)\s*\](?!\()",
        triggers="<|[",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "contains a fake chat role marker",
        (
            r"##{0,5}[ \t]*(?:system|developer)(?:[ \t]+(?:prompt|message|instructions?"
            r"|override))?[ \t]*:?[ \t]*$",
            "#",
        ),
        (r"##{0,5}[ \t]*instructions?[ \t]*:", "#"),
        # "System: Ubuntu 22.04" is a fact; "System: you must …" addresses the model.
        r"(?:system|developer)(?:[ \t]+(?:prompt|message|note|override))?[ \t]*:"
        r"(?:[ \t]*$|[^\n]{0,200}?\b(?:you|your|assistant|user|model|ai|llm|instructions?|must"
        r"|always|never|authori[sz]ed|allowed|permitted|ignore|reveal|override)\b)",
        triggers="system|developer",
        word_start=False,
        before=_LINE_START,
    ),
    _rule(
        "prompt_injection",
        "asks to hide something from the user",
        (
            rf"(?:{_NOT})\s+(?:ever\s+)?(?:tell(?:ing)?|inform(?:ing)?"
            rf"|(?:mention|reveal|show|disclose)(?:ing)?\s+(?:this|it|that|anything)\s+to)\s+"
            rf"{_USER_OBJECT}\b(?!\s+to\b)",
            "tell|inform|mention|reveal|show|disclose",
        ),
        # "never reveal to the user that …": the object comes first, then what is hidden.
        (
            rf"(?:{_NOT})\s+(?:ever\s+)?(?:mention|reveal|disclose|explain)(?:ing)?\s+to\s+"
            rf"{_USER_OBJECT}\b",
            "mention|reveal|disclose|explain",
        ),
        (
            rf"(?:{_NOT})\s+(?:let(?:ting)?)\s+{_USER_OBJECT}\s+(?:know|see|find\s+out|notice)\b",
            "let",
        ),
        (
            rf"without\s+(?:telling|informing|notifying|alerting|letting)\s+{_USER_OBJECT}\b",
            "without",
        ),
        (
            rf"without\s+{_USER_OBJECT}(?:'s)?\s+(?:knowing|knowledge|noticing|consent)\b",
            "without",
        ),
        rf"(?:keep|hide)\s+(?:this|it|that|these|the\s+following|everything)\s+(?:(?:a\s+)?"
        rf"(?:secret|hidden|private|confidential)\s+)?from\s+{_USER_OBJECT}\b",
        r"(?:users?|humans?|operators?)\s+"
        r"(?:must|should|need|needs)\s*(?:not|n't|never)\s+(?:know|find\s+out|see\s+this"
        r"|be\s+told)\b",
        triggers="user|human|operator|owner|admin|people",
    ),
    _rule(
        "prompt_injection",
        "uses jailbreak vocabulary",
        r"jailbr(?:eak|oken|eaking)",
        r"do\s+anything\s+now\b",
        r"(?:god|dan|jailbreak|unrestricted|unfiltered|uncensored)\s+mode\b",
        r"you(?:\s+are|'re)\s+(?:now\s+)?(?:in|running\s+in|operating\s+in)\s+"
        r"(?:developer|dev|debug|admin|god)\s+mode\b",
        r"(?:enable|enter|activate|switch\s+to|switch\s+into|engage)\s+(?:your\s+)?"
        r"(?:developer|dev)\s+mode\b(?!\s+(?:on|in|for|of|via|from|with|through|by|under)\b)",
        r"bypass\s+(?:your\s+|the\s+|all\s+|any\s+)?(?:(?:safety|content|security)\s+)?"
        r"(?:filters?|guardrails?|restrictions?|safeguards?|moderation|censorship)\b",
        triggers="jailbr|anything now|mode|bypass",
    ),
    # -- prompt injection, Chinese (no word boundaries in Chinese) --
    _rule(
        "prompt_injection",
        "asks to ignore previous instructions",
        rf"(?:{_ZH_OVERRIDE_VERB})(?:掉|了)?(?:你|您)?(?:(?:{_ZH_QUAL}){_ZH_QUAL_LINK}){{1,3}}"
        rf"(?:{_ZH_OBJECT})",
        r"忘(?:记|掉)(?:你|您)?(?:之前|以前|以上|上面)?(?:的)?(?:所有|一切|全部)(?:的)?"
        r"(?:指令|设定|规则|提示|约束|限制|内容|事情|东西|对话)",
        r"忘(?:记|掉)一切",
        r"(?:覆盖|推翻|替换)(?:掉)?(?:你的|您的|系统)的?(?:指令|提示词?|设定|规则)",
        triggers="忽|无视|理会|遵守|别管|忘|丢弃|抛弃|放弃|覆盖|推翻|替换",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "tries to give the assistant a new role",
        r"你现在(?:是|扮演|作为|变成|成为)",
        r"从现在(?:开始|起),?你(?:是|将|要|必须|只|不再|应该)",
        r"你(?:已经)?不再是",
        triggers="你",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "tries to give the assistant a new role",
        r"(?:扮演|充当|假装|假扮)",
        triggers="扮演|充当|假装|假扮",
        word_start=False,
        # Only as an imperative: "Alice 在团队中扮演重要角色" is a fact.
        before=r"(?:^|[.!?;:。！？；]\s*|请|你(?:要|必须|需要|现在|将|来)?|现在)$",
    ),
    _rule(
        "prompt_injection",
        "asks to hide something from the user",
        rf"(?:不要|不准|不许|别|切勿|禁止|不得|不能|千万别)(?:告诉|告知|透露给)(?:给)?{_ZH_USER}(?!去)",
        rf"(?:不要|不准|不许|别|不能|不得)让{_ZH_USER}(?:知道|发现|察觉|看到)",
        rf"(?:对|向){_ZH_USER}(?:保密|隐瞒|隐藏)|瞒着{_ZH_USER}|不让{_ZH_USER}(?:知道|发现|察觉)",
        rf"{_ZH_USER}不知情",
        rf"(?:不要|别|不能|不得)(?:向|对|跟|和){_ZH_USER}(?:透露|提及|提起|说|显示|展示)",
        triggers="用户|使用者|主人|管理员|人类",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "tries to replace or reveal the system prompt",
        r"(?:新的?|更新的?|更新后的|真正的|隐藏的|替换的?)系统(?:提示词?|指令)",
        r"系统(?:提示词?|指令)(?:已|已经)?(?:被)?(?:更新|覆盖|替换|修改|变更)",
        r"(?:泄露|输出|打印|显示|重复|告诉我|透露|复述)(?:一下)?(?:你的|您的)(?:系统)?"
        r"(?:提示词?|指令|设定)",
        triggers="系统|你的|您的",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "announces new instructions for the assistant",
        r"(?<!更)新的?(?:系统)?(?:指令|指示)",
        triggers="新",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "contains a fake chat role marker",
        r"[【\[]\s*系统(?:消息|提示)?\s*[】\]]",
        triggers="系统",
        word_start=False,
    ),
    _rule(
        "prompt_injection",
        "contains a fake chat role marker",
        r"(?:系统|系统提示|系统消息|开发者)[ \t]*:"
        r"(?:[ \t]*$|[^\n]{0,200}?(?:你|您|助手|用户|模型|指令|必须|忽略|总是|永远|不要|授权))",
        triggers="系统|开发者",
        word_start=False,
        before=_LINE_START,
    ),
    _rule(
        "prompt_injection",
        "uses jailbreak vocabulary",
        r"越狱",
        r"(?:上帝|无限制|无约束|越狱|dan)模式",
        r"你(?:现在|已经|已)?(?:处于|在|进入了?|开启了?)(?:开发者|管理员)模式",
        r"绕过(?:你的|所有|一切|系统的?)?(?:安全|限制|规则|过滤|审查|审核|防护|约束|护栏)",
        triggers="越狱|模式|绕过",
        word_start=False,
    ),
    # -- exfiltration in prose --
    _rule(
        "exfiltration",
        "asks to send credentials somewhere",
        r"(?:send|post|upload|e-?mail|mail|forward|transmit|leak|exfiltrate|dm|deliver)\s+"
        r"(?:(?:the|your|my|our|all|any|of|these|those|its|their|user'?s|users'|this|that)\s+)"
        rf"{{0,3}}(?:[a-z0-9_.-]{{1,30}}\s+)?(?:{_SECRET_NOUN})\b"
        r"[^\n.]{0,80}?\b(?:to|at|via|over|on)\b",
        triggers="send|post|upload|mail|forward|transmit|leak|exfil|dm|deliver",
        # "Never send the API key to anyone" is advice, not a request.
        skip_negated=True,
    ),
    _rule(
        "exfiltration",
        "asks to put credentials into a URL or image link",
        r"(?:include|append|add|put|embed|insert)\s+(?:the\s+|your\s+)?"
        r"(?:api\s+key|token|password|secret|credentials|session|cookie)s?\s+(?:in|into|to)\s+"
        r"(?:the\s+|an?\s+)?(?:url|query|link|image|request|webhook)\b",
        triggers="url|query|link|image|request|webhook",
    ),
    _rule(
        "exfiltration",
        "asks to send credentials somewhere",
        rf"(?:把|将)[^\n。.!！?？]{{0,12}}?(?:{_ZH_SECRET}|\.env)[^\n。.!！?？]{{0,12}}?"
        r"(?:发送|发给|发到|发至|传给|传到|传至|上传|泄露|泄漏|外泄|转发|贴到|粘贴到|邮寄|寄给|回传"
        r"|分享给|post)",
        rf"(?:发送|发给|泄露|泄漏|外泄|回传)[^\n。]{{0,8}}?(?:{_ZH_SECRET})[^\n。]{{0,6}}?(?:到|给|至)",
        triggers="把|将|发送|发给|泄|回传",
        word_start=False,
        skip_negated=True,
    ),
)
_NEGATED = re.compile(r"(?:\bnot|\bnever|n't|不要|不能|不得|禁止|切勿|别)\s*$")


# --- Commands and URLs (line-scoped, so a secret three paragraphs after `curl` is not tied
# to it) ---------------------------------------------------------------------------------------

_NET_COMMAND = re.compile(
    # One group of literal-first branches, so the engine can skip ahead by first character.
    r"(?:curl|wget|invoke-webrequest|invoke-restmethod|iwr|irm|nc|ncat|netcat|socat|telnet"
    r"|scp|sftp|rsync|ftp|tftp|smbclient|httpie|aria2c|requests\.(?:get|post|put|patch)"
    r"|httpx\.(?:get|post|put|patch)|urllib\.request|fetch(?=\())(?!\w)"
)
_SECRET_REFERENCE = re.compile(
    r"\$\{?[a-z0-9_]{0,40}(?:key|token|secret|passw(?:or)?d|pwd|credential|creds|cookie)"
    r"[a-z0-9_]{0,40}\}?"
    r"|\$env:[a-z0-9_]{0,40}(?:key|token|secret|password)"
    r"|%[a-z0-9_]{0,40}(?:key|token|secret|password)[a-z0-9_]{0,40}%"
    r"|os\.environ|getenv\("
    r"|~/\.ssh\b|\.ssh/|/\.ssh\b|id_(?:rsa|dsa|ecdsa|ed25519)\b"
    r"|\.env(?!\.(?:example|sample|template|dist)\b)(?![a-z0-9_-])"
    r"|/etc/(?:passwd|shadow|sudoers)\b|\.aws/credentials|\.netrc\b|\.git-credentials"
    r"|\.npmrc\b|\.pypirc\b|\.kube/config|\.docker/config\.json|kubeconfig\b"
)
_ENCODE_OR_DUMP = re.compile(r"\bbase64\b|\b(?:env|printenv|history)\s*\|")
_URL = re.compile(r"https?://[^\s<>\"'`)\]]{1,2000}")
_MD_IMAGE = re.compile(r"!\[[^\]\n]{0,200}\]\(\s*<?(https?://[^\s)>]{1,2000})")
_PLACEHOLDER = re.compile(
    r"\{\{?\s*[a-z_][a-z0-9_.\s-]{0,40}\}|\$\{?[a-z_][a-z0-9_]{1,40}|%7b|<[a-z_]{2,40}>"
)
_SECRET_PLACEHOLDER = re.compile(
    r"(?:\{\{?|\$\{?|%7b%7b|%7b)\s*[a-z0-9_.]{0,30}"
    r"(?:key|token|secret|passw|pwd|cred|cookie|session|env|memor|prompt|history|conversation)"
)


def _logical_line(text: str, pos: int) -> tuple[int, int]:
    """Bounds of the line holding `pos`, following shell `\\` continuations both ways."""
    start = text.rfind("\n", 0, pos) + 1
    while start > 1 and text[start - 2] == "\\":
        start = text.rfind("\n", 0, start - 1) + 1
    end = text.find("\n", pos)
    while end > 0 and text[end - 1] == "\\":
        end = text.find("\n", end + 1)
    return start, len(text) if end == -1 else end


def _command_findings(norm: _Normalised) -> Iterator[tuple[str, str, int, int, bool]]:
    text = norm.text
    done_until = 0
    for command in _NET_COMMAND.finditer(text):
        if command.start() < done_until or (
            command.start() and _is_word(text[command.start() - 1])
        ):
            continue
        base, done_until = _logical_line(text, command.start())
        body = text[base:done_until]
        command_start, command_end = command.start() - base, command.end() - base
        reference = _SECRET_REFERENCE.search(body)
        if reference is not None:
            lo = base + min(command_start, reference.start())
            hi = base + max(command_end, reference.end())
            yield (
                "exfiltration",
                "sends a secret or a credentials file with a network command",
                *norm.span(lo, hi),
                False,
            )
            continue
        dump = _ENCODE_OR_DUMP.search(body)
        if dump is not None and ("|" in body or "$(" in body or "`" in body):
            lo = base + min(command_start, dump.start())
            hi = base + max(command_end, dump.end())
            yield (
                "exfiltration",
                "pipes encoded data or environment variables to a network command",
                *norm.span(lo, hi),
                False,
            )


def _url_findings(norm: _Normalised) -> Iterator[tuple[str, str, int, int, bool]]:
    text = norm.text
    if "http" not in text:
        return
    images = set()
    for m in _MD_IMAGE.finditer(text):
        images.add(m.start(1))
        if _PLACEHOLDER.search(m.group(1)):
            yield (
                "exfiltration",
                "embeds an image whose URL would carry data out when rendered",
                *norm.span(m.start(), m.end()),
                False,
            )
    for m in _URL.finditer(text):
        if m.start() not in images and _SECRET_PLACEHOLDER.search(m.group()):
            yield (
                "exfiltration",
                "links to a URL that would carry a secret out",
                *norm.span(m.start(), m.end()),
                False,
            )


# --- Secrets (original text, case-sensitive) -------------------------------------------------

_SECRET_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "contains what looks like an API secret key (sk-…)",
        re.compile(
            r"sk-(?:proj-|ant-api\d\d-|ant-|live-|test-|or-v1-|svcacct-|admin-)?"
            r"(?P<body>[A-Za-z0-9_-]{20,})"
        ),
        "sk-",
    ),
    (
        "contains what looks like a Stripe secret key",
        re.compile(r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        "k_",
    ),
    (
        "contains what looks like a GitHub token",
        re.compile(r"gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}"),
        "gh",
    ),
    (
        "contains what looks like a Slack token or webhook",
        re.compile(
            r"xox[abposr]-[A-Za-z0-9-]{10,}"
            r"|https://hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+"
        ),
        "xox|hooks.slack.com",
    ),
    (
        "contains what looks like an AWS access key id",
        re.compile(r"A(?:KIA|SIA)[0-9A-Z]{16}\b"),
        "AKIA|ASIA",
    ),
    (
        "contains a private key",
        re.compile(r"-----BEGIN(?: [A-Z0-9]+){0,4} PRIVATE KEY(?: BLOCK)?-----"),
        "-----",
    ),
    (
        "contains what looks like a Telegram bot token",
        re.compile(r"\d{8,10}:[A-Za-z0-9_-]{35}(?![\w-])"),
        ":",
    ),
    (
        "contains what looks like a Google API key",
        re.compile(r"AIza[0-9A-Za-z_-]{35}(?![\w-])"),
        "AIza",
    ),
    (
        "contains what looks like a Hermes Hub API token",
        re.compile(r"hh_[A-Za-z0-9_-]{40,}"),
        "hh_",
    ),
)
_HAS_DIGIT = re.compile(r"\d")
_HAS_LETTER = re.compile(r"[A-Za-z]")


def _secret_findings(text: str) -> Iterator[tuple[str, str, int, int, bool]]:
    for reason, regex, triggers in _SECRET_RULES:
        if not any(t in text for t in triggers.split("|")):
            continue
        for m in regex.finditer(text):
            # No leading lookbehind in the patterns (it would disable the engine's fast
            # first-character skip); a key glued to a longer token is not a key.
            if m.start() and (_is_word(text[m.start() - 1]) or text[m.start() - 1] in "-:"):
                continue
            body = m.groupdict().get("body")
            # A long hyphenated slug after "sk-" is not a key; real keys mix digits and letters.
            if body is not None and not (_HAS_DIGIT.search(body) and _HAS_LETTER.search(body)):
                continue
            redact = "PRIVATE KEY" not in m.group()
            yield ("secret", reason, m.start(), m.end(), redact)


# --- Hidden Unicode (original text) ----------------------------------------------------------

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


# --- Findings and excerpts -------------------------------------------------------------------


def _select(
    text: str, raw: list[tuple[str, str, int, int, bool]], quiet: set[int]
) -> list[Finding]:
    """Drop overlaps within a category, cap each category, order by position."""
    raw.sort(key=lambda r: (r[2], -(r[3] - r[2])))
    kept: list[tuple[str, str, int, int, bool]] = []
    last_end: dict[str, int] = {}
    counts: dict[str, int] = {}
    for category, reason, start, end, redact in raw:
        if start < last_end.get(category, -1) or counts.get(category, 0) >= (
            MAX_FINDINGS_PER_CATEGORY
        ):
            continue
        last_end[category] = end
        counts[category] = counts.get(category, 0) + 1
        kept.append((category, reason, start, end, redact))
    return [
        Finding(
            category=category,
            reason=reason,
            excerpt=_excerpt(text, start, end, redact=redact, quiet=quiet),
            start=start,
            end=end,
        )
        for category, reason, start, end, redact in kept
    ]


def _render(text: str, start: int, end: int, quiet: set[int]) -> list[str]:
    """One token per character, hidden ones spelled out, whitespace runs as one space."""
    tokens: list[str] = []
    for i in range(start, end):
        ch = text[i]
        if ch.isspace():
            if not tokens or tokens[-1] != " ":
                tokens.append(" ")
        elif i not in quiet and (
            _HIDDEN.match(ch) or ch == "\u00ad" or unicodedata.category(ch) in ("Cc", "Cf")
        ):
            tokens.append(f"<U+{ord(ch):04X}>")
        else:
            tokens.append(ch)
    return tokens


def _next_to_selector(text: str, i: int) -> bool:
    return any(0 <= j < len(text) and 0xFE00 <= ord(text[j]) <= 0xFE0F for j in (i - 1, i + 1))


def _take(tokens: list[str], budget: int, *, from_end: bool) -> tuple[list[str], bool]:
    """Whole tokens up to `budget` characters; the flag says whether any were left out."""
    taken: list[str] = []
    used = 0
    for tok in reversed(tokens) if from_end else tokens:
        if used + len(tok) > budget:
            break
        taken.append(tok)
        used += len(tok)
    truncated = len(taken) < len(tokens)
    return (taken[::-1] if from_end else taken), truncated


def _excerpt(text: str, start: int, end: int, *, redact: bool, quiet: set[int]) -> str:
    """At most EXCERPT_LIMIT characters around the match, on one line."""
    if redact:
        keep = min(6, (end - start) // 4)
        core = [*text[start : start + keep], "…[redacted]"]
    else:
        core = _render(text, start, min(end, start + EXCERPT_LIMIT), quiet)
    core, cut = _take(core, EXCERPT_LIMIT - 1, from_end=False)
    if cut or end - start > EXCERPT_LIMIT and not redact:
        return "".join(core).strip() + "…"
    room = EXCERPT_LIMIT - sum(len(t) for t in core)
    left_room = room // 2
    right_room = room - left_room
    left: list[str] = []
    right: list[str] = []
    left_cut = right_cut = False
    if left_room >= 1:  # one character of each side's room is kept for the "…"
        left_source = _render(text, max(0, start - left_room), start, quiet)
        left, left_cut = _take(left_source, left_room - 1, from_end=True)
        left_cut = left_cut or start - left_room > 0
    if right_room >= 1:
        right_source = _render(text, end, min(len(text), end + right_room), quiet)
        right, right_cut = _take(right_source, right_room - 1, from_end=False)
        right_cut = right_cut or end + right_room < len(text)
    excerpt = ("…" if left_cut else "") + "".join(left + core + right) + ("…" if right_cut else "")
    return excerpt.strip()
