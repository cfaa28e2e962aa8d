"""Persistence and remote access: a skill that plants a key in `authorized_keys`, installs a
cron job without a person editing the crontab, makes a shell start-up file download or
connect somewhere, drops a login item (LaunchAgents, autostart), or opens a reverse shell
keeps its author's access after the chat is over.

What passes on purpose: reading or fixing permissions (`chmod 600 ~/.ssh/authorized_keys`),
`ssh-copy-id` (a person's own key to a server they reach), `crontab -l` and `crontab -e`
(a person edits), a start-up line that only sets things up locally
(`echo 'export PATH=…' >> ~/.bashrc`, `source <(kubectl completion bash)`, `eval
"$(direnv hook bash)"`), installing a
systemd unit that does not fetch anything, `bash -c '</dev/tcp/127.0.0.1/5432'` as a port
check.
"""

from __future__ import annotations

import re

from hermes_site.scanning.shell import Check, check, line_of

CATEGORY = "persistence"

_WRITES = re.compile(r">|\btee\b|\bcp\b|\bmv\b|\binstall\b|\bln\b|\bof=|\bsed\s+-i|\brsync\b")
_NETWORK_OR_EXEC = re.compile(
    r"https?://|\b(?:curl|wget|nc|ncat|socat|telnet|fetch|iwr|irm)\b|/dev/(?:tcp|udp)/|base64"
    r"|\bnohup\b|python[\d.]*\s+-c|\bperl\s+-e|\bruby\s+-e|\bnode\s+-e"
)


def _command_before(text: str, start: int) -> int:
    """Where the command holding `start` begins (at most 300 characters back): after `;`,
    `&`, `(` or a newline, not after `|`, so `cat key | tee -a authorized_keys` is one."""
    lo = max(0, start - 300)
    return max(text.rfind(sep, lo, start) + 1 or lo for sep in ";&\n(")


def _written(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """The file at `m` is the target of a write in its own command."""
    begin = _command_before(text, m.start())
    if _WRITES.search(text, begin, m.start()) is None:
        return None
    return begin, m.end()


def _written_with_network(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """A start-up file written with something that downloads, connects or runs decoded code."""
    span = _written(text, m)
    if span is None:
        return None
    lo, hi = line_of(text, m.start())
    return span if _NETWORK_OR_EXEC.search(text, lo, hi) else None


_STARTUP_FILE = (
    r"(?:\.(?:bashrc|bash_profile|bash_login|profile|zshrc|zprofile|zshenv|zlogin|kshrc|cshrc"
    r"|tcshrc)|\.config/fish/config\.fish|/etc/(?:profile|bash\.bashrc|zsh/zshrc|zshenv"
    r"|environment|rc\.local)|/etc/profile\.d/[\w.-]+|/etc/systemd/system/[\w@.-]+"
    r"|\.config/systemd/user/[\w@.-]+)(?![\w.-])"
)

PERSISTENCE_CHECKS: tuple[Check, ...] = (
    check(
        CATEGORY,
        "adds a key to authorized_keys (lasting SSH access for whoever holds it)",
        r"authorized_keys2?(?![\w.-])",
        triggers="authorized_keys",
        word_start=False,
        post=_written,
    ),
    check(
        CATEGORY,
        "installs a cron job without a person editing it",
        # `crontab -` (stdin) or `crontab FILE`; `crontab -l` and `crontab -e` pass.
        r"crontab(?:\s+-u\s+\S+)?\s+(?:-(?=[\s;&|)`\"']|$)|[~./$][^\s;&|)`\"']*"
        r"|[\w-]+\.\w+)",
        triggers="crontab",
    ),
    check(
        CATEGORY,
        "installs a cron job without a person editing it",
        r"/etc/cron(?:tab|\.d/|\.(?:hourly|daily|weekly|monthly)/)|/var/spool/cron",
        triggers="/etc/cron|/var/spool/cron",
        word_start=False,
        post=_written,
    ),
    check(
        CATEGORY,
        "makes a shell or service start-up file download or connect somewhere",
        _STARTUP_FILE,
        triggers="rc|profile|zsh|fish|/etc/|systemd",
        word_start=False,
        post=_written_with_network,
    ),
    check(
        CATEGORY,
        "installs a login item that starts on its own",
        r"library/launch(?:agents|daemons)/|\.config/autostart/",
        triggers="library/launch|autostart",
        word_start=False,
        post=_written,
    ),
    check(
        CATEGORY,
        "opens a reverse shell (remote control of this machine)",
        r"/dev/(?:tcp|udp)/[^\s/]{1,100}/\d{1,5}\s*(?:0>&1|<&\d|>&\s*\d|\d?>&\s*/dev/)"
        r"|(?:ba|z)?sh\s+-i\s+[^\n]{0,40}?/dev/(?:tcp|udp)/"
        r"|exec\s+\d+<>\s*/dev/(?:tcp|udp)/"
        r"|(?:nc|ncat|netcat)\s[^\n;|&]{0,100}?\s-[a-z]*[ec]\s+(?:/bin/|/usr/bin/)?(?:ba|z)?sh\b"
        r"|socat\s[^\n]{0,100}?exec:[\"']?(?:/bin/)?(?:ba)?sh"
        r"|mkfifo\s[^\n]{0,120}?\|\s*(?:nc|ncat|netcat)\s",
        triggers="/dev/tcp|/dev/udp|nc|ncat|netcat|socat|mkfifo",
    ),
)
