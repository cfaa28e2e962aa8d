"""Network commands and URLs that would carry secrets out. A command reads its arguments
from its logical line (continuations joined) or, inside an inline code span, from the span,
so a secret three paragraphs after `curl` is not tied to it; a shell word counts only where
a command starts, so "so `curl` calls see the keys in `.env`" is prose about the tool."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hermes_site.scanning.normalise import Normalised, is_word
from hermes_site.scanning.own_api import sends_to_own_api

_NET_COMMAND = re.compile(
    # One group of literal-first branches, so the engine can skip ahead by first character.
    r"(?:curl|wget|invoke-webrequest|invoke-restmethod|iwr|irm|nc|ncat|netcat|socat|telnet"
    r"|scp|sftp|rsync|ftp|tftp|smbclient|httpie|aria2c|requests\.(?:get|post|put|patch)"
    r"|httpx\.(?:get|post|put|patch)|urllib\.request|fetch(?=\())(?!\w)"
)
_SECRET_REFERENCE = re.compile(
    # A named environment variable: `$X`, `${X}`, `$env:X`, `%X%`, `process.env.X`,
    # `os.environ["X"]`, `os.getenv("X")` (named groups give the name, so the
    # credential-to-its-own-API rule can read it).
    r"\$\{?(?P<sh>[a-z0-9_]{0,40}(?:key|token|secret|passw(?:or)?d|pwd|credential|creds|cookie)"
    r"[a-z0-9_]{0,40})\}?"
    r"|\$env:(?P<ps>[a-z0-9_]{0,40}(?:key|token|secret|password)[a-z0-9_]{0,40})"
    r"|%(?P<cmd>[a-z0-9_]{0,40}(?:key|token|secret|password)[a-z0-9_]{0,40})%"
    r"|os\.environ(?:\[\s*[\"'](?P<py>[a-z0-9_]{1,80})[\"']\s*\]"
    r"|\.get\(\s*[\"'](?P<pyget>[a-z0-9_]{1,80})[\"'])?"
    r"|getenv\(\s*(?:[\"'](?P<getenv>[a-z0-9_]{1,80})[\"'])?"
    r"|process\.env(?![.\[])"
    r"|process\.env(?:\.|\[[\"'])(?P<js>[a-z0-9_]{0,40}(?:key|token|secret|passw|cred)"
    r"[a-z0-9_]{0,40})"
    r"|~/\.ssh\b|\.ssh/|/\.ssh\b|id_(?:rsa|dsa|ecdsa|ed25519)\b"
    r"|(?<!process)\.env(?!\.(?:example|sample|template|dist)\b)(?![a-z0-9_-])"
    r"|/etc/(?:passwd|shadow|sudoers)\b|\.aws/credentials|\.netrc\b|\.git-credentials"
    r"|\.npmrc\b|\.pypirc\b|\.kube/config|\.docker/config\.json|kubeconfig\b"
)
_NAME_GROUPS = ("sh", "ps", "cmd", "py", "pyget", "getenv", "js")
_ENCODE_OR_DUMP = re.compile(r"\bbase64\b|\b(?:env|printenv|history)\s*\|")
# Commands whose output is a secret or a pile of them.
_SECRET_SOURCE = (
    r"(?<![\w-])(?:env|printenv|history|export\s+-p|declare\s+-x)(?![\w-])"
    r"|gh\s+auth\s+token|gcloud\s+auth\s+(?:application-default\s+)?print-(?:access|identity)-token"
    r"|aws\s+(?:configure\s+(?:get|export-credentials)|sts\s+get-session-token"
    r"|ecr\s+get-login-password|secretsmanager\s+get-secret-value|ssm\s+get-parameters?)"
    r"|az\s+account\s+get-access-token|kubectl\s+(?:get|describe)\s+secrets?\b"
    r"|kubectl\s+config\s+view\b[^|\n]{0,80}--raw|vault\s+(?:kv\s+get|read|print\s+token)"
    r"|\bop\s+(?:read|item\s+get)|security\s+find-\w+-password|\bpass\s+show"
    r"|heroku\s+config|doctl\s+auth|docker\s+inspect|npm\s+token|gpg\s[^|\n]{0,60}--export-secret"
)
_PIPED_SECRET = re.compile(rf"(?:{_SECRET_SOURCE})[^;\n]{{0,300}}?\|[^;\n|]{{0,40}}\Z")
_DUMPED_TO_FILE = re.compile(
    rf"(?:{_SECRET_SOURCE})(?:\s[^;&|\n>]{{0,200}})?\s*>{{1,2}}\s*[\"']?(?P<file>[^\s;&|<>\"']{{1,200}})"
)
MAX_DUMPED = 20
# `curl -d "$(printenv)" …`: the whole environment substituted into the command line.
_ENVIRONMENT_SUBSTITUTED = re.compile(
    r"(?:\$\(|`)\s*(?:env|printenv|export\s+-p|declare\s+-x|set|history)\s*(?:\)|`)"
)
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


# Where a shell word starts a command: at the start of a line or an inline code span, after
# a shell operator, a prompt, a list marker, a colon, a comment sign, a quote (`sh -c "…`),
# `$(`, a prefix command (`sudo`, `xargs`, `then`…) or variable assignments (`A=1 curl`).
# "so `curl` calls see them" or "the scp step" is prose about the tool, not a command.
_COMMAND_POSITION = re.compile(
    r"(?:^\s*(?:[-*+]|\d{1,3}[.)])?|[;&|({!=\"'#>$%:]|\$\(|(?<![\w-])(?:sudo|then|do|else|exec"
    r"|xargs|time|nohup|command|env|watch|run|execute|timeout\s+\S{1,10}))"
    r"\s*(?:[a-z_][a-z0-9_]{0,40}=\S{0,200}\s+){0,8}\Z"
)
MAX_LINE_BEFORE = 300
MAX_SPAN = 2000


def _command_bounds(text: str, command: re.Match[str]) -> tuple[int, int] | None:
    """The text a network command reads its arguments from, or None when the word is not a
    command. Inside an inline code span (an odd number of backticks before it on its line)
    that is the span; elsewhere, the logical line. A shell word (`curl`, `scp`…) must stand
    where a command starts (`_COMMAND_POSITION`); a call (`requests.get(`, `fetch(`) is code
    wherever it stands."""
    pos = command.start()
    line_start = max(0, pos - MAX_LINE_BEFORE)
    line_start = text.rfind("\n", line_start, pos) + 1 or line_start
    if text.count("`", line_start, pos) % 2:
        start = text.rfind("`", line_start, pos) + 1
        limit = min(len(text), pos + MAX_SPAN)
        line_end = text.find("\n", pos, limit)
        line_end = limit if line_end == -1 else line_end
        end = text.find("`", command.end(), line_end)
        end = line_end if end == -1 else end
    else:
        start, end = _logical_line(text, pos)
    shell_word = command.group()[-1].isalnum() and "." not in command.group()
    if shell_word and not _COMMAND_POSITION.search(text[max(start, pos - 200) : pos]):
        return None
    return start, end


def _leaked_reference(body: str) -> re.Match[str] | None:
    """The first secret reference on a network command's line that is not a credential
    sent to its own API (see `own_api.py`): a file, the whole environment, or a variable
    whose service is not where every URL on the line goes."""
    references = list(_SECRET_REFERENCE.finditer(body))
    if not references:
        return None
    names = []
    for reference in references:
        name = next((reference.group(g) for g in _NAME_GROUPS if reference.group(g)), None)
        if name is None:
            return reference
        names.append(name)
    if sends_to_own_api(body, names, references):
        return None
    return references[0]


def _names_file(name: str) -> re.Pattern[str]:
    """`name` as a whole path on a command line (`@/tmp/e`, `-T /tmp/e`, `< e`)."""
    return re.compile(rf"(?:^|(?<=[\s@=<\"'/])){re.escape(name)}(?=$|[\s\"';|&)])")


def _dumped_files(text: str) -> list[str]:
    """Files that a command writes a secret or the environment into (`env > /tmp/e`)."""
    if ">" not in text:
        return []
    names = dict.fromkeys(m.group("file") for m in _DUMPED_TO_FILE.finditer(text))
    return list(names)[:MAX_DUMPED]


def _command_findings(norm: Normalised) -> Iterator[tuple[str, str, int, int, bool]]:
    text = norm.text
    dumped = [_names_file(name) for name in _dumped_files(text)]
    done_until = 0
    for command in _NET_COMMAND.finditer(text):
        if command.start() < done_until or (command.start() and is_word(text[command.start() - 1])):
            continue
        bounds = _command_bounds(text, command)
        if bounds is None:
            continue
        base, done_until = bounds
        body = text[base:done_until]
        command_start, command_end = command.start() - base, command.end() - base
        reference = _leaked_reference(body)
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
        dumped_inline = _ENVIRONMENT_SUBSTITUTED.search(body)
        if dumped_inline is not None:
            yield (
                "exfiltration",
                "pipes a secret or the environment into a network command",
                *norm.span(base + min(command_start, dumped_inline.start()), done_until),
                False,
            )
            continue
        piped = _PIPED_SECRET.search(body, max(0, command_start - 400), command_start)
        if piped is not None:
            yield (
                "exfiltration",
                "pipes a secret or the environment into a network command",
                *norm.span(base + piped.start(), base + command_end),
                False,
            )
            continue
        upload = next((f for f in dumped if f.search(body, command_end) is not None), None)
        if upload is not None:
            yield (
                "exfiltration",
                "uploads a file that a secret or the environment was written into",
                *norm.span(base + command_start, done_until),
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


_URL_VARIABLE = re.compile(r"\$\{?([a-z_][a-z0-9_]{0,60})")


def _own_api_url(url: str) -> bool:
    """`https://api.telegram.org/bot${TELEGRAM_BOT_TOKEN}/getMe`: every placeholder is a
    shell variable named for the service the URL goes to."""
    if len(_SECRET_PLACEHOLDER.findall(url)) != len(
        [m for m in _URL_VARIABLE.finditer(url) if _SECRET_PLACEHOLDER.match(url, m.start())]
    ):
        return False
    names = [
        m.group(1) for m in _URL_VARIABLE.finditer(url) if _SECRET_PLACEHOLDER.match(url, m.start())
    ]
    return bool(names) and sends_to_own_api(url, names, [])


def _url_findings(norm: Normalised) -> Iterator[tuple[str, str, int, int, bool]]:
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
        if (
            m.start() not in images
            and _SECRET_PLACEHOLDER.search(m.group())
            and not (_own_api_url(m.group()))
        ):
            yield (
                "exfiltration",
                "links to a URL that would carry a secret out",
                *norm.span(m.start(), m.end()),
                False,
            )
