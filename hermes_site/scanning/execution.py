"""Code execution: a download or a decoded payload run as code without anyone reading it
(`curl … | sh`, `bash <(curl …)`, `sh -c "$(curl …)"`, `iex (New-Object Net.WebClient)
.DownloadString(…)`, `… | base64 -d | bash`, `exec(base64.b64decode(…))`, `powershell -enc`).

What passes on purpose: downloading to a file (`curl -fsSL URL -o install.sh`, then reading
and running it), pipes into tools that are not interpreters (`| jq`, `| tar xz`,
`| python3 -m json.tool`, `| docker login --password-stdin`). Official installers piped to
a shell (rustup, Homebrew, uv) are blocked too: a skill should download, check, then run.
"""

from __future__ import annotations

import re
from bisect import bisect_left

from hermes_site.scanning.shell import Check, check, pipeline_end

CATEGORY = "code_execution"
DOWNLOAD = "pipes a download into an interpreter (download with -o FILE, read it, then run it)"
DECODED = "decodes a hidden payload and runs it"

_DOWNLOADER = r"curl|wget|iwr|irm|invoke-webrequest|invoke-restmethod|xh|http|https|aria2c|fetch"
_TO_INTERPRETER = re.compile(
    r"(?<!\|)\|(?!\|)\s*(?:sudo\s+(?:-\S+\s+){0,4})?(?:env\s+)?(?:\w+=\S*\s+){0,4}"
    r"(?:(?:/usr)?(?:/local)?/bin/)?"
    r"(?:(?:ba|z|k|da|fi|tc|c|a)?sh(?![\w.-])|iex(?![\w-])|invoke-expression(?![\w-])"
    r"|(?:python[\d.]*|perl|ruby|node|php|pwsh|powershell|bun|deno\s+run)"
    r"(?=\s*(?:-\s*)?(?:$|[;&|)`]))"
    r"|(?:source|\.)\s+/dev/stdin|\$\{?shell\}?(?![\w-]))"
)


def _piped_to_interpreter(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    into = _TO_INTERPRETER.search(text, m.end(), pipeline_end(text, m.end()))
    return None if into is None else (m.start(), into.end())


# `bash <(curl …)`, `sh -c "$(curl …)"`, `eval "$(curl …)"`: the interpreter right before.
_INTERPRETER_BEFORE = re.compile(
    r"(?<![\w$-])(?:(?:ba|z|k|da)?sh|source|\.|python[\d.]*|perl|ruby|node|php|eval|exec|iex)"
    r"\s+(?:-\S+\s+){0,3}[\"']?$"
)


def _substituted_into_interpreter(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """The download (found first: a literal `<(`, `$(` or backtick is cheap to look for)
    is run when an interpreter takes its output as a file or a script argument."""
    head = _INTERPRETER_BEFORE.search(text, max(0, m.start() - 80), m.start())
    return None if head is None else (head.start(), m.end())


# Fetching code at run time, in the languages a one-liner or a skill script is written in.
_FETCH = re.compile(
    r"urlopen|urllib\.request|urllib2|requests\.(?:get|post|request)|httpx\.(?:get|post|stream)"
    r"|\bfetch\s*\(|\bhttps?\.(?:get|request)\s*\(|axios|lwp::|\bget\s*\(?\s*[\"']https?:"
    r"|open-uri|uri\.open|net::http|file_get_contents\s*\(\s*[\"']https?:|curl_exec"
    r"|downloadstring|webclient|\bcurl\s|\bwget\s|socket\.(?:socket|create_connection)"
)
WINDOW = 400
_fetches: tuple[str, list[int]] = ("", [])


def _runs_fetched_code(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """`exec(`/`eval(` with code fetched from the network within WINDOW characters (the
    same one-liner, or the lines of a short script); `regex.exec(s)` in JavaScript is a
    method, not the builtin. Fetches are found once per text, so many calls stay linear."""
    global _fetches
    if m.start() and text[m.start() - 1] == ".":
        return None
    if _fetches[0] is not text:
        _fetches = (text, [f.start() for f in _FETCH.finditer(text)])
    positions = _fetches[1]
    i = bisect_left(positions, m.start() - WINDOW)
    if i == len(positions) or positions[i] > m.end() + WINDOW:
        return None
    return m.start(), m.end()


EXECUTION_CHECKS: tuple[Check, ...] = (
    check(
        CATEGORY,
        "runs code fetched from the network (python -c, node -e, perl, ruby, php)",
        r"(?:os\.system|os\.popen|subprocess\.\w{1,20}|execsync|shell_exec|system)\s*\("
        r"[^;\n]{0,200}?(?:urlopen|requests\.get|httpx\.get|fetch\(|file_get_contents\(\s*[\"']http"
        r"|lwp::|uri\.open|net::http)"
        # Perl or Ruby running what a download printed: system(`curl …`), eval `wget …`.
        r"|(?:system|exec|eval|qx)\s*\(?\s*`\s*(?:curl|wget)\s"
        # Python 2's exec statement: exec urllib2.urlopen(…).read()
        r"|exec\s+(?:urllib2?|requests|httpx|urlopen)\b",
        triggers="system|popen|subprocess|execsync|shell_exec|exec|eval|qx",
    ),
    check(
        CATEGORY,
        "runs code fetched from the network (python -c, node -e, perl, ruby, php)",
        r"(?:exec|eval|instance_eval|execfile)(?=\s*\()|\.then\(\s*eval\b"
        r"|eval\s+(?:get|uri|net::http|open|lwp)\b|new\s+function\s*\(|vm\.run\w{0,20}\(",
        triggers="exec|eval|function|vm.run",
        word_start=False,
        post=_runs_fetched_code,
    ),
    check(
        CATEGORY,
        DOWNLOAD,
        rf"(?:{_DOWNLOADER})(?=\s)",
        triggers=("|",),
        post=_piped_to_interpreter,
        reads=pipeline_end,
    ),
    check(
        CATEGORY,
        "decodes a hidden payload and pipes it into an interpreter",
        r"(?:base64\s+(?:-[a-z]*d[a-z]*|--decode)|xxd\s+-r"
        r"|openssl\s+(?:enc\s+)?(?:-\w+\s+){0,3}-?(?:base64|a)\s+(?:-\w+\s+){0,3}-d)(?![\w-])"
        # Reversed, rot13 or escaped text is a payload too: `echo 'hs | …' | rev | sh`.
        r"|rev(?=\s*\|)|tr\s+(?:-\w+\s+)?[\"']?\[?a-z\]?[\"']?\s+[\"']?\[?n-za-m"
        r"|base32\s+(?:-d|--decode)|printf\s+[\"']?(?:%b|\\x[0-9a-f]{2})",
        triggers=("|",),
        post=_piped_to_interpreter,
        reads=pipeline_end,
    ),
    check(
        CATEGORY,
        DOWNLOAD,
        rf"(?:<\(|\$\(|`)\s*(?:sudo\s+)?(?:{_DOWNLOADER})(?=\s)",
        triggers="<(|$(|`",
        word_start=False,
        post=_substituted_into_interpreter,
    ),
    check(
        CATEGORY,
        DECODED,
        r"(?:eval|(?:ba|z)?sh\s+-c|python[\d.]*\s+-c)\s+[\"']?\$\([^)\n]{0,300}?"
        r"(?:base64\s+(?:-[a-z]*d|--decode)|xxd\s+-r)",
        triggers="$(",
    ),
    check(
        CATEGORY,
        DOWNLOAD,
        r"(?:iex|invoke-expression)\s*[($][^\n]{0,200}?(?:downloadstring|downloaddata"
        r"|net\.webclient|iwr|irm|invoke-webrequest|invoke-restmethod|start-bitstransfer)",
        triggers="iex|invoke-expression",
    ),
    check(
        CATEGORY,
        "runs a script straight from a URL",
        r"mshta(?:\.exe)?\s+[\"']?(?:https?|javascript|vbscript):"
        r"|regsvr32(?:\.exe)?\s[^\n]{0,100}?/i:https?:"
        r"|rundll32(?:\.exe)?\s[^\n]{0,60}?javascript:",
        triggers="mshta|regsvr32|rundll32",
    ),
    check(
        CATEGORY,
        "runs an encoded PowerShell command",
        r"(?:powershell|pwsh)(?:\.exe)?(?:\s+\S+){0,8}?\s+-e(?:c|nc\w*|ncodedcommand)?\s+"
        r"[\"']?[a-z0-9+/]{20,}",
        triggers="powershell|pwsh",
    ),
    check(
        CATEGORY,
        DECODED,
        r"(?:exec|eval|execfile|compile|assert|new\s+function)\s*\(\s*(?:"
        r"__import__\(\s*[\"']base64[\"']\s*\)\s*\.\s*b(?:64|32|16|85)decode"
        r"|base64\.b(?:64|32|16|85)decode|b64decode|codecs\.decode|zlib\.decompress"
        r"|marshal\.loads|bytes\.fromhex|atob|base64_decode|gzinflate|gzuncompress|str_rot13"
        r"|buffer\.from|unescape|string\.fromcharcode)",
        triggers="exec|eval|compile|assert|function",
    ),
)
