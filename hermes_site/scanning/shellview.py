"""What the shell will run, read the way the shell reads it: `cu''rl`, `c"u"rl`, `"curl"` and
`c\\url` are `curl`; `${IFS}` is a space; `$(echo 'lruc' | rev)` and
`$(printf '\\x63\\x75\\x72\\x6c')` are `curl`; and a variable set to a word in the same text
(`c=curl; $c …`, `X=cu; Y=rl; $X$Y`) is that word. The command checks then run on this copy.

Two rewrites, each a `Derived` view so findings map back to the original text, made only when
the text has something to rewrite. Quotes are read only in words that spell a command once
they are dropped (so `"hello"world` or JSON keys stay as they are); at most `MAX_VARIABLES`
assignments are followed, and only to short plain words.
"""

from __future__ import annotations

import re

from hermes_site.scanning.normalise import Derived, Normalised

MAX_VARIABLES = 50
MAX_WORD = 40

COMMAND_WORDS = frozenset(
    {
        *("curl", "wget", "bash", "sh", "zsh", "dash", "ksh", "fish", "python", "python3"),
        *("perl", "ruby", "node", "php", "deno", "bun", "nc", "ncat", "netcat", "socat"),
        *("telnet", "rm", "chmod", "chown", "dd", "mkfs", "cat", "env", "printenv", "base64"),
        *("eval", "exec", "crontab", "sudo", "iex", "powershell", "pwsh", "scp", "rsync"),
        *("ssh", "tar", "openssl", "xxd", "rev", "tee", "cp", "mv", "find", "grep", "history"),
        *("gpg", "security", "kubectl", "gh", "gcloud", "aws", "vault", "source"),
    }
)
_WORD_CHAR = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-'\"\\")
_BREAKERS = re.compile(r"['\"\\]")
_SUBSTITUTION = re.compile(
    r"\$(?:\{ifs[^}\n]{0,12}\}|ifs(?![a-z0-9_]))"
    r"|(?:\$\(|`)\s*(?:echo|printf)\s+(?:-[ne]+\s+)?(?P<q>['\"]?)(?P<reversed>[^'\"\s|)`]{1,80})"
    r"(?P=q)\s*\|\s*rev\s*(?:\)|`)"
    r"|(?:\$\(|`)\s*printf\s+(?P<q2>['\"]?)(?P<hex>(?:\\x[0-9a-f]{2}){1,40})(?P=q2)\s*(?:\)|`)"
)
_ASSIGNMENT = re.compile(
    r"(?:^|(?<=[\s;&|(]))(?P<name>[a-z_][a-z0-9_]{0,30})=(?P<q>['\"]?)"
    r"(?P<value>[a-z0-9_./:+-]{1,60})(?P=q)(?=[\s;&|)]|$)"
)
_REFERENCE = re.compile(r"(?P<q>['\"]?)\$\{?(?P<name>[a-z_][a-z0-9_]{0,30})\}?(?P=q)")


def shell_views(norm: Normalised) -> list[Normalised]:
    """The lines the shell would read differently, as it reads them (empty: nothing to
    rewrite). Only the lines around a rewrite are returned (`CONTEXT_LINES` either side,
    at most `MAX_SIDE` characters), so a long text with one `"sh"` is not scanned again."""
    views: list[Normalised] = []
    current = norm
    text = norm.text
    if "'" in text or '"' in text or "\\" in text or "$" in text or "`" in text:
        rewritten = _rewrite(norm, _first_pass(text))
        if rewritten is not None:
            current = rewritten[0]
            views.append(_window(*rewritten))
    if "=" in current.text and "$" in current.text:
        rewritten = _rewrite(current, _variables(current.text))
        if rewritten is not None:
            views.append(_window(*rewritten))
    return views


CONTEXT_LINES = 1
MAX_SIDE = 2000


def _rewrite(
    parent: Normalised, edits: list[tuple[int, int, str]]
) -> tuple[Normalised, list[int]] | None:
    """`parent` with `edits` applied, and where each edit landed in the new text."""
    if not edits:
        return None
    view = Derived(parent)
    text, pos = parent.text, 0
    landed = []
    for start, end, replacement in sorted(edits):
        if start < pos:
            continue
        view.add(text[pos:start], pos, start)
        landed.append(view.length)
        view.add(replacement or "", start, end)
        pos = end
    view.add(text[pos:], pos, len(text))
    view.finish()
    return view, landed


def _window(view: Normalised, positions: list[int]) -> Normalised:
    """The lines of `view` around `positions`, as a view of their own."""
    text = view.text
    ranges: list[list[int]] = []
    for pos in positions:
        floor, ceil = max(0, pos - MAX_SIDE), min(len(text), pos + MAX_SIDE)
        lo, end = floor, pos
        for _ in range(CONTEXT_LINES + 1):
            k = text.rfind("\n", floor, end)
            if k == -1:
                lo = floor
                break
            lo, end = k + 1, k
        hi, start = ceil, pos
        for _ in range(CONTEXT_LINES + 1):
            k = text.find("\n", start, ceil)
            if k == -1:
                hi = ceil
                break
            hi = start = k + 1
        if ranges and lo <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], hi)
        else:
            ranges.append([lo, hi])
    window = Derived(view)
    for lo, hi in ranges:
        window.add(text[lo:hi], lo, hi)
        if hi < len(text) and text[hi - 1] != "\n":
            window.add("\n", hi - 1, hi)  # a cut line must not run into the next range
    window.finish()
    return window


def _first_pass(text: str) -> list[tuple[int, int, str]]:
    """Edits for `${IFS}`, reversed or escaped command names, and broken-up command words."""
    edits: list[tuple[int, int, str]] = []
    if "$" in text or "`" in text:
        for m in _SUBSTITUTION.finditer(text):
            if m.group("reversed"):
                edits.append((m.start(), m.end(), m.group("reversed")[::-1]))
            elif m.group("hex"):
                hexed = m.group("hex")
                decoded = bytes(int(hexed[i + 2 : i + 4], 16) for i in range(0, len(hexed), 4))
                edits.append((m.start(), m.end(), decoded.decode("latin-1").lower()))
            else:
                edits.append((m.start(), m.end(), " "))
    done_until = -1
    for m in _BREAKERS.finditer(text):
        if m.start() < done_until:
            continue
        start, end = m.start(), m.end()
        while start > 0 and m.start() - start < MAX_WORD and text[start - 1] in _WORD_CHAR:
            start -= 1
        while end < len(text) and end - m.start() < MAX_WORD and text[end] in _WORD_CHAR:
            end += 1
        done_until = end
        word = text[start:end]
        plain = word.replace("'", "").replace('"', "").replace("\\", "")
        if plain != word and plain in COMMAND_WORDS:
            edits.append((start, end, plain))
    return edits


def _variables(text: str) -> list[tuple[int, int, str]]:
    """Edits that put each variable's value where it is used (`$c`, `${c}`, `"$c"`)."""
    values: dict[str, str] = {}
    for m in _ASSIGNMENT.finditer(text):
        if len(values) >= MAX_VARIABLES and m.group("name") not in values:
            break
        values[m.group("name")] = m.group("value")
    if not values:
        return []
    return [
        (m.start(), m.end(), values[m.group("name")])
        for m in _REFERENCE.finditer(text)
        if m.group("name") in values
    ]
