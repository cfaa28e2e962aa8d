"""Destructive commands: recursive deletes or permission changes of the root, home or a system
directory, disk wiping, fork bombs, killing every process, dropping or emptying production
data, and (in skills) force-pushing a main branch.

What passes on purpose, because runbooks need it: deletes and permission changes below a
system directory (`rm -rf build/`, `rm -rf /srv/app/releases/old`, `chown -R app /srv/app`),
`dd` or `mkfs` on image files, `mkswap /swapfile`, `shred` of a file, SQL that drops tables
or truncates outside production (`DROP TABLE IF EXISTS tmp_x`, `dropdb hermes_dev`),
`kill -9 PID`, `sudo reboot` (a maintenance step, recoverable), force-pushing a feature branch.
"""

from __future__ import annotations

import posixpath
import re

from hermes_site.scanning.shell import (
    SKILL,
    Check,
    args,
    check,
    command_end,
    line_of,
    pipeline_end,
)

CATEGORY = "destructive_command"

_ROOTS = frozenset(
    {
        "",
        "~",
        "$home",
        "${home}",
        "$env:userprofile",
        "%userprofile%",
        "$env:systemroot",
        "%systemroot%",
        "$env:systemdrive",
        "%systemdrive%",
        "c:",
        "c:\\windows",
        "c:\\users",
    }
)
_SYSTEM_DIRS = frozenset(
    {
        *("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt"),
        *("/proc", "/root", "/sbin", "/srv", "/sys", "/usr", "/usr/bin", "/usr/lib"),
        *("/usr/local", "/usr/sbin", "/var", "/var/lib", "/mnt", "/media", "/snap"),
        *("/applications", "/library", "/system", "/users", "/private"),
    }
)
DEVICE = (
    r"/dev/(?:sd[a-z]|nvme\d|hd[a-z]|vd[a-z]|xvd[a-z]|mmcblk\d|r?disk\d|md\d|dm-\d|nbd\d"
    r"|mapper/|disk/|root(?![\w.-]))"
)


def dangerous_path(word: str) -> bool:
    """True for the root, a home directory or a top-level system directory, with any
    trailing `/`, `/*` or `/.` (`/`, `/*`, `~`, `$HOME/*`, `/etc/`, `C:\\`); False for
    anything below them (`/var/www/site`, `~/.cache/pip`)."""
    if not word or word[0] not in "/~$%c":
        return False
    if word[0] == "/":  # `/tmp/../..` is the root
        word = posixpath.normpath(word.rstrip("*"))
    base = word.rstrip("/\\*.")
    return base in _ROOTS or base in _SYSTEM_DIRS


def _is_recursive(words: list[str], windows: bool) -> bool:
    for w in words:
        if w in ("--recursive", "-recurse", "/s") or (windows and w.startswith("-r")):
            return True
        if w.startswith("-") and not w.startswith("--") and "r" in w and not windows:
            return True
    return False


def _operands(words: list[str], windows: bool = False) -> list[str]:
    """Words that are not options (`/s`, `/q` are options on Windows, `/*` is not)."""
    return [
        w
        for w in words
        if not (w.startswith("-") or (windows and w.startswith("/") and len(w) == 2))
    ]


def _recursive_delete(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    end = command_end(text, m.end())
    words = args(text, m.end(), end)
    head = m.group()
    windows = head in ("remove-item", "rd", "rmdir", "del")
    if head == "rmdir" and "/s" not in words:
        return None  # POSIX rmdir removes only empty directories
    if _is_recursive(words, windows) and (
        "--no-preserve-root" in words or any(dangerous_path(w) for w in _operands(words, windows))
    ):
        return m.start(), end
    return None


def _find_delete(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    end = command_end(text, m.end())
    words = args(text, m.end(), end)
    starts = []
    for w in words:
        if w.startswith(("-", "(", "!", "\\(")):
            break
        starts.append(w)
    if not any(dangerous_path(w) for w in starts):
        return None
    rest = text[m.end() : end]
    if "-delete" in rest or _EXEC_RM.search(rest):
        return m.start(), end
    pipeline = text[end : pipeline_end(text, m.end())]
    if _XARGS_RM.match(pipeline):
        return m.start(), m.start() + len(text[m.start() : end]) + len(pipeline)
    return None


_EXEC_RM = re.compile(r"-(?:exec|execdir|ok)\s+(?:sudo\s+)?(?:/bin/)?(?:rm|shred|unlink)\b")
_XARGS_RM = re.compile(r"\|\s*(?:sudo\s+)?xargs\b[^|\n]{0,80}\b(?:rm|shred)\b")


def _recursive_permissions(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    end = command_end(text, m.end())
    words = args(text, m.end(), end)
    operands = _operands(words)[1:]  # the first operand is the mode or the owner
    if _is_recursive(words, False) and any(dangerous_path(w) for w in operands):
        return m.start(), end
    return None


_SQL_STATEMENT = re.compile(
    r"\s+(?:if\s+exists\s+)?(?:only\s+)?[\"`]?[\w.$-]+[\"`]?"
    r"(?:\s*,\s*[\"`]?[\w.$-]+[\"`]?){0,20}\s*(?:;|cascade\b|restrict\b|restart\b|continue\b"
    r"|$|[\"'`)])"
)
_STATEMENT_END = re.compile(r"\s*(?:;|$|[\"'`)])")
_PRODUCTION = re.compile(r"(?<![a-z])(?:prod|production|prd|live)(?![a-z])")


def _production_data(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    end = m.end()
    if m.lastgroup == "sql":
        statement = _SQL_STATEMENT.match(text, m.end())
        if statement is None:  # "drop the database dump …" is prose
            return None
        end = statement.end()
    elif m.lastgroup == "delete":
        statement = _STATEMENT_END.match(text, m.end())
        if statement is None:  # a WHERE clause, or prose
            return None
        end = statement.end()
    lo, hi = line_of(text, m.start())
    if _PRODUCTION.search(text, lo, hi) is None:
        return None
    return m.start(), end


_FORCE = frozenset({"--force", "-f", "--force-with-lease", "--force-if-includes"})
_MAIN = re.compile(r"(?:^|[:+])(?:refs/heads/)?(?:main|master|trunk|production|prod)$")


def _force_push_main(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    end = command_end(text, m.end())
    words = args(text, m.end(), end)
    forced = any(w in _FORCE or w.startswith("--force-with-lease=") for w in words)
    refs = _operands(words)[1:]  # the first operand is the remote
    if any(r.startswith("+") and _MAIN.search(r) for r in refs) or (
        forced and any(_MAIN.search(r) for r in refs) or forced and "--all" in words
    ):
        return m.start(), end
    return None


DELETES = "deletes the root, home or a system directory recursively"
WIPES = "wipes or overwrites a disk device"

DESTRUCTIVE_CHECKS: tuple[Check, ...] = (
    check(
        CATEGORY,
        DELETES,
        r"rm(?=\s)",  # one literal head per check: the regex engine skips ahead to it
        triggers="rm",
        post=_recursive_delete,
        reads=command_end,
    ),
    check(
        CATEGORY,
        DELETES,
        r"r(?:d|mdir|emove-item)(?=\s)",
        triggers="rd|rmdir|remove-item",
        post=_recursive_delete,
        reads=command_end,
    ),
    check(
        CATEGORY,
        DELETES,
        r"del(?=\s)",
        triggers="del",
        post=_recursive_delete,
        reads=command_end,
    ),
    check(
        CATEGORY,
        "deletes files under the root, home or a system directory",
        r"find(?=\s)",
        triggers="find",
        post=_find_delete,
        reads=command_end,
    ),
    check(CATEGORY, WIPES, rf"dd\s[^\n;|&]{{0,300}}?\sof=[\"']?{DEVICE}", triggers="/dev/"),
    check(
        CATEGORY,
        WIPES,
        r"(?:mkfs(?:\.[a-z0-9]+)?|mke2fs|mkswap|mkntfs|mkdosfs|shred|wipefs|blkdiscard)"
        rf"\s[^\n;|&]{{0,200}}?{DEVICE}",
        triggers="/dev/",
    ),
    check(CATEGORY, WIPES, rf"(?:>|tee\s+(?:-a\s+)?)\s*[\"']?{DEVICE}", triggers="/dev/"),
    check(
        CATEGORY,
        WIPES,
        r"sgdisk\s[^\n;|&]{0,100}?(?:--zap-all|--zap|-z)(?![\w-])"
        r"|diskutil\s+(?:erasedisk|zerodisk|randomdisk|secureerase|partitiondisk|erasevolume)\b"
        r"|nvme\s+format\s|hdparm\s[^\n;|&]{0,100}?--security-erase",
        triggers="sgdisk|diskutil|nvme|hdparm",
    ),
    check(CATEGORY, WIPES, r"format\s+c:(?![\w])", triggers="format"),
    check(
        CATEGORY,
        "deletes the system's backups or recovery options",
        r"vssadmin(?:\.exe)?\s+delete\s+shadows|wmic(?:\.exe)?\s+shadowcopy\s+delete"
        r"|bcdedit(?:\.exe)?\s[^\n]{0,60}?recoveryenabled\s+no"
        r"|wbadmin(?:\.exe)?\s+delete\s+(?:catalog|systemstatebackup|backup)",
        triggers="vssadmin|shadowcopy|bcdedit|wbadmin",
    ),
    check(
        CATEGORY,
        "contains a fork bomb",
        r"(?P<name>[a-z_:][\w:.-]{0,30})\s*\(\)\s*\{\s*(?P=name)\s*\|\s*(?P=name)\s*&",
        triggers="()",
    ),
    check(
        CATEGORY,
        "contains a fork bomb",
        r"%0\s*\|\s*%0|fork\s+while\s+fork"
        r"|while\s*\(?\s*(?:true|1)\s*\)?\s*[:;{]?\s*(?:do\s+)?(?:os\.)?fork\s*\(\)",
        triggers="%0|fork",
        word_start=False,
    ),
    check(
        CATEGORY,
        "changes permissions or ownership of the root, home or a system directory recursively",
        r"(?:chmod|chown|chgrp)(?=\s)",
        triggers="chmod|chown|chgrp",
        post=_recursive_permissions,
        reads=command_end,
    ),
    check(
        CATEGORY,
        "kills every process (kill -1)",
        r"kill\s+(?:(?:-s\s+\w+|-n\s+\d+|-\w+|--)\s+){1,3}-1(?![\w.])|killall5\s+-\w+",
        triggers="kill",
    ),
    check(
        CATEGORY,
        "drops or empties production data",
        r"(?P<sql>drop\s+(?:database|schema)|truncate(?:\s+table)?)"
        r"|(?P<delete>delete\s+from\s+[\w.\"`]+)"
        r"|dropdb|flushall|flushdb|db:drop|db:reset|delete\s+(?:namespace|ns)\b"
        r"|terraform\s+destroy",
        triggers="drop|truncate|delete|flush|db:|destroy",
        post=_production_data,
    ),
    check(
        CATEGORY,
        "force-pushes a main branch, rewriting shared history",
        r"git\s+push(?=\s)",
        triggers="push",
        kinds=SKILL,
        post=_force_push_main,
        reads=command_end,
    ),
)
