"""Phrase rules on the normalised text: prompt injection (English and Chinese) and
exfiltration requests in prose."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from hermes_site.scanning.context import in_code, quoted
from hermes_site.scanning.normalise import is_word


@dataclass(frozen=True)
class _Rule:
    category: str
    reason: str
    regexes: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]
    triggers: tuple[str, ...]
    word_start: bool
    before: re.Pattern[str] | None
    skip_negated: bool
    not_before: re.Pattern[str] | None = None
    not_after: re.Pattern[str] | None = None
    skip_quoted: bool = False
    skip_code: bool = False

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        """Matches that start at a word boundary and, if required, after the right context.

        Patterns start with a literal (no leading `\\b`) so the regex engine can skip ahead by
        first character; the boundary and context are checked here instead."""
        for regex, triggers in self.regexes:
            if triggers and not any(t in text for t in triggers):
                continue
            for m in regex.finditer(text):
                start = m.start()
                if self.word_start and start and is_word(text[start - 1]):
                    continue
                if self.before and not self.before.search(text, max(0, start - 60), start):
                    continue
                if self.skip_negated and _NEGATED.search(text, max(0, start - 12), start):
                    continue
                if self.not_before and self.not_before.search(text, max(0, start - 40), start):
                    continue
                if self.not_after and self.not_after.match(text, m.end(), m.end() + 60):
                    continue
                if self.skip_quoted and quoted(text, start, m.end()):
                    continue
                if self.skip_code and in_code(text, start, m.end()):
                    continue
                yield m


def _rule(
    category: str,
    reason: str,
    *patterns: str | tuple[str, str],
    triggers: str,
    word_start: bool = True,
    before: str | None = None,
    skip_negated: bool = False,
    not_before: str | None = None,
    not_after: str | None = None,
    skip_quoted: bool = False,
    skip_code: bool = False,
) -> _Rule:
    """`triggers` ("|"-separated) lets the scan skip a rule when none of them occur; a pattern
    given as (pattern, triggers) is also skipped when none of its own occur. `before` must
    end where the match starts, `not_before` must not (both are searched in the 60 or 40
    characters before it), `not_after` must not match right after it; `skip_quoted` and
    `skip_code` skip a match quoted as an example or written as data in code."""
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
        _anchored(before),
        skip_negated,
        _anchored(not_before),
        re.compile(not_after) if not_after else None,
        skip_quoted,
        skip_code,
    )


def _anchored(pattern: str | None) -> re.Pattern[str] | None:
    """A context pattern that must end exactly where the match starts. Its final `$` becomes
    `\\Z`: in MULTILINE mode `$` also matches before any newline in the window, so a blank
    line 60 characters back made "…a three-level loading system:" look like a line start."""
    if pattern is None:
        return None
    body = pattern[:-1] if pattern.endswith("$") else pattern
    return re.compile(rf"(?:{body})\Z", re.MULTILINE)


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
_LINE_START = r"(?:^|\n)[ \t]*\Z"
_JAILBREAK_TERM_BEFORE = (
    r"(?:\b(?:detect|identif|flag|classif|block|prevent|resist|defen[cd]|mitigat|evaluat|measur"
    r"|benchmark|red-?team|stud|analy[sz]|catch|log|report|monitor|contain|label|tag|filter|score)"
    r"\w*|\b(?:against|known|common|anti|of)|(?:iphone|ipad|device|phone|android)s?\s+(?:is|was"
    r"|are|were))[\s-]+(?:(?:the|a|an|any|all|new|possible|likely|potential|these|such)\s+)?"
)
_JAILBREAK_TERM_AFTER = (
    r"(?:\s+|-)(?:attempts?|attacks?|detection|detectors?|classifiers?|benchmarks?|datasets?"
    r"|robustness|resistance|research|(?:success\s+)?rates?|defen[cs]es?|mitigations?"
    r"|evaluations?|evals?|techniques?|taxonomy|literature|papers?|risks?|vectors?|filters?"
    r"|guards?|scanners?|corpus|(?:and|or)\s+(?:prompt[\s-])?injection"
    # interpretability and abliteration methods: "whitened SVD + jailbreak-contrastive"
    r"|contrastive|directions?|activations?|steering|probes?|suites?"
    r"|prompts?\s+(?:dataset|corpus|detection|classifier|benchmark)"
    r"|(?:iphone|ipad|ios|device|phone|android|console)s?)\b"
)
_ADDRESSED = (
    r"you|your|assistant|user|model|ai|llm|instructions?|must|always|never|obey|authori[sz]ed"
    r"|allowed|permitted|ignore|reveal|override"
)
_SETTLED = (
    r"ready|done|able|all\s+set|set\s+up|good\s+to\s+go|logged|signed|connected|authenticated"
    r"|finished|inside|in\s+the|on\s+the|at\s+the|in\s+your|on\s+your|running|using|familiar"
    r"|up\s+to\s+date|subscribed|registered|enrolled|on\s+version|on\s+call|on-call"
)
_UNBOUND = (
    r"unrestricted|unfiltered|uncensored|unlimited|unbound|jailbroken|evil|malicious|rogue"
    r"|amoral|unethical|unaligned|lawless"
)

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
        # "You are now ready to deploy" is how-to prose, "you are now DAN" is not.
        rf"you(?:\s+are|'re)\s+(?:now|no\s+longer)\b(?!\s+(?:{_SETTLED})\b)",
        r"(?:from\s+now\s+on|from\s+this\s+(?:point|moment)\s+(?:on|forward)|henceforth"
        r"|starting\s+(?:now|immediately)),?\s+(?:you|your|always|never|ignore|respond|answer"
        r"|act|behave)\b",
        r"you\s+(?:have|has)\s+no\s+(?:restrictions|limitations|rules|filters|guidelines)\b",
        r"no\s+longer\s+bound\s+by\b",
        r"your\s+only\s+(?:rule|instruction|directive|law|master|loyalty)\s+(?:is|now)\b",
        r"you\s+(?:now\s+)?answer\s+(?:only\s+)?to\s+me\b",
        r"you\s+are\s+(?:now\s+)?(?:free|freed|released|liberated|unbound)\s+(?:from|of)\s+"
        r"(?:your|all|any|the)\b",
        triggers="you|now on|point|moment|henceforth|starting|bound",
    ),
    _rule(
        "prompt_injection",
        "tries to give the assistant a new role",
        # Quoted as an example or negated ("never roleplay as …"), it is a mention.
        r"role-?\s?play\s+as\b",
        r"pretend\s+(?:to\s+be|(?:that\s+)?you(?:\s+are|'re))\b",
        triggers="play|pretend",
        skip_negated=True,
        skip_quoted=True,
    ),
    _rule(
        "prompt_injection",
        "tries to give the assistant a new role",
        # A skill may say "Act as an active guide"; a role without limits is an override.
        r"(?:act|behave|operate|respond|answer)\s+as\s+(?:if|though)\s+(?:you\s+(?:were|are"
        r"|have|had)\s+(?:no\s+(?:rules|restrictions|limits|filters|guidelines)|an?\s+"
        rf"(?:{_UNBOUND}))|there\s+(?:were|are)\s+no\s+(?:rules|restrictions|limits|filters"
        r"|guidelines)|(?:your|the)\s+(?:rules|instructions|guidelines|restrictions)\s+"
        r"(?:did\s+not|didn't|do\s+not|don't)\s+(?:exist|apply))",
        r"(?:act|behave|operate|respond|answer)\s+as\s+(?:(?:a|an|the|my|your)\s+)?"
        rf"(?:[a-z-]{{1,20}}\s+){{0,3}}?(?:(?:{_UNBOUND})\b|dan\b|(?:[a-z-]{{1,20}}\s+)?"
        r"(?:without|with\s+no)\s+(?:any\s+)?(?:restrictions|rules|filters|limits|limitations"
        r"|guidelines|censorship|morals|ethics|boundaries)\b)",
        triggers="act|behave|operate|respond|answer",
        skip_negated=True,
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
        # `stop=["</s>"]`, "wraps each turn in `<|im_start|>`": a marker written as data.
        skip_code=True,
    ),
    _rule(
        "prompt_injection",
        "contains a fake chat role marker",
        (
            # A "## System" heading over "Ubuntu 22.04" is a section; over "obey …" it is not.
            r"##{0,5}[ \t]*(?:system|developer)(?:[ \t]+(?:prompt|message|instructions?"
            r"|override))?[ \t]*:?[ \t]*\n(?:[ \t]*\n){0,3}[^\n]{0,200}?"
            rf"\b(?:{_ADDRESSED})\b",
            "#",
        ),
        (r"##{0,5}[ \t]*instructions?[ \t]*:", "#"),
        # "System: Ubuntu 22.04" is a fact; "System: you must …" addresses the model.
        r"(?:system|developer)(?:[ \t]+(?:prompt|message|note|override))?[ \t]*:"
        rf"(?:[ \t]*$|[^\n]{{0,200}}?\b(?:{_ADDRESSED})\b)",
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
        # The word as a machine-learning or security term ("detect jailbreak attempts",
        # "a jailbroken iPhone") is a mention; anything else is treated as the real thing.
        r"jailbr(?:eak|oken|eaking)",
        triggers="jailbr",
        not_before=_JAILBREAK_TERM_BEFORE,
        not_after=_JAILBREAK_TERM_AFTER,
    ),
    _rule(
        "prompt_injection",
        "uses jailbreak vocabulary",
        r"do\s+anything\s+now\b",
        r"(?:god|dan|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|liberated)\s*mode\b",
        r"(?:respond|answer|reply)\s+(?:to\s+\w+\s+)?(?:\w+\s+){0,2}?without\s+(?:any\s+)?"
        r"(?:refusals?|refusing|restrictions|filters?|censorship|disclaimers|warnings|moral)",
        r"no\s+refusals?\s*(?:,|\.|!|;|$)",
        r"you(?:\s+are|'re)\s+(?:now\s+)?(?:in|running\s+in|operating\s+in)\s+"
        r"(?:developer|dev|debug|admin|god)\s+mode\b",
        r"(?:enable|enter|activate|switch\s+to|switch\s+into|engage)\s+(?:your\s+)?"
        r"(?:developer|dev)\s+mode\b(?!\s+(?:on|in|for|of|via|from|with|through|by|under)\b)",
        r"bypass\s+(?:your\s+|the\s+|all\s+|any\s+)?(?:(?:safety|content|security)\s+)?"
        r"(?:filters?|guardrails?|restrictions?|safeguards?|moderation|censorship)\b",
        triggers="anything now|mode|without|refusal|bypass",
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
        triggers="越狱",
        word_start=False,
        not_before=r"(?:检测|识别|防御|防范|抵御|评估|对抗|防止|拦截)(?:模型输出中的|输出中的|中的|的)?",
        not_after=r"(?:攻击|尝试|检测|样本|数据集|基准|防御|成功率|风险|提示词检测)",
    ),
    _rule(
        "prompt_injection",
        "uses jailbreak vocabulary",
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
