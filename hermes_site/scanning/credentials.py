"""High-confidence credential formats, matched on the original text (case-sensitive)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hermes_site.scanning.normalise import is_word

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
            if m.start() and (is_word(text[m.start() - 1]) or text[m.start() - 1] in "-:"):
                continue
            body = m.groupdict().get("body")
            # A long hyphenated slug after "sk-" is not a key; real keys mix digits and letters.
            if body is not None and not (_HAS_DIGIT.search(body) and _HAS_LETTER.search(body)):
                continue
            redact = "PRIVATE KEY" not in m.group()
            yield ("secret", reason, m.start(), m.end(), redact)
