"""Credential harvesting: reading, collecting or printing secret stores (SSH private keys,
cloud CLI credentials, `.netrc`, `.env`, `/etc/shadow`, keychains, browser cookie and
password databases, a process's environment, cloud metadata credentials), hunting the
filesystem for them, and gathering secret environment variables.

Sending such things somewhere is exfiltration (`commands.py`); this module catches the
step before, which also leaks them on its own: whatever a command prints lands in the
transcript, the history and the model's context.

What passes on purpose: public keys (`cat ~/.ssh/id_ed25519.pub`), using a key or a file
without reading it out (`ssh -i ~/.ssh/id_deploy`, `ssh-add`, `chmod 600`, `source .env`,
`cp .env.example .env`, `docker run --env-file .env`), a secret piped into the tool that
needs it (`echo "$TOKEN" | docker login --password-stdin`), `env | grep -i proxy`, and a
mention of a path in prose ("the CI keys are not in ~/.aws/credentials").
"""

from __future__ import annotations

import ipaddress
import re
from fnmatch import fnmatchcase

from hermes_site.scanning.destructive import dangerous_path
from hermes_site.scanning.shell import Check, args, check, command_end

CATEGORY = "credential_harvesting"

_END = r"(?=$|[\s\"'`;|&)])"
_SECRET_STORE = re.compile(
    rf"\.ssh[/\\](?:id_[\w-]+|identity)(?!\.pub)(?![\w.-])|\.ssh(?:[/\\]\*?)?{_END}"
    rf"|\.aws[/\\]credentials|\.aws(?:[/\\]\*?)?{_END}"
    r"|[._]netrc\b|\.git-credentials|\.pgpass|\.my\.cnf|\.npmrc|\.pypirc|\.s3cfg|\.boto\b"
    r"|\.docker[/\\]config\.json|\.kube[/\\]config|\.config[/\\]gcloud|\.azure[/\\]"
    r"|\.gnupg|\.password-store|\.vault-token|\.config[/\\]gh[/\\]hosts\.yml"
    r"|\.terraform\.d[/\\]credentials|wallet\.dat|\.kdbx\b"
    r"|(?<!process)\.env(?!\.(?:example|sample|template|dist|test)\b)(?![\w-])"
    r"|/etc/(?:g?shadow|sudoers|master\.passwd|ssl/private)"
)
# Words that are also English only count where a command starts ("more ~/.netrc" in prose is
# rare, "read more about .env files" is not).
_ENGLISH_READERS = frozenset({"type", "more", "less", "head", "tail", "nl", "view", "strings"})
_COMMAND_POSITION = re.compile(r"(?:^|[\n;&|`(]|\$\(|\b(?:sudo|then|do|run|exec|xargs)\s|:\s)\s*$")


def _reads_secret_store(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    if m.group().strip() in _ENGLISH_READERS and not _COMMAND_POSITION.search(
        text, max(0, m.start() - 12), m.start()
    ):
        return None
    end = command_end(text, m.end())
    store = _SECRET_STORE.search(text, m.end(), end)
    if store is not None:
        return m.start(), store.end()
    globbed = glob_of_secret_store(text, m.end(), end)
    return None if globbed is None else (m.start(), globbed)


# Secret stores a glob may be written to reach (`/etc/sha*ow`, `~/.ss?/id_*`).
_GLOB_TARGETS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/master.passwd",
    "~/.ssh/id_rsa",
    "~/.ssh/id_ed25519",
    "~/.ssh/id_ecdsa",
    "~/.ssh/id_dsa",
    "~/.aws/credentials",
    "~/.netrc",
    "~/.git-credentials",
    "~/.pgpass",
    "~/.docker/config.json",
    "~/.kube/config",
    "~/.vault-token",
    "~/.npmrc",
    "~/.pypirc",
    ".env",
)
_GLOB_CHAR = re.compile(r"[*?\[]")
_GLOB_WORD = re.compile(r"[^\s;|&<>`()]{1,200}")
_HOME = re.compile(r"^(?:\$home|\$\{home\}|/root|/home/[\w.-]{1,40}|/users/[\w.-]{1,40})(?=/)")


def glob_of_secret_store(text: str, start: int, end: int) -> int | None:
    """The end of the first word in `text[start:end]` that is a glob matching a secret store,
    or None. Only words holding `*`, `?` or `[` are read (at most 20 per command)."""
    if not _GLOB_CHAR.search(text, start, end):
        return None
    seen = 0
    for word in _GLOB_WORD.finditer(text, start, end):
        token = word.group().strip("\"'")
        if not any(c in token for c in "*?["):
            continue
        seen += 1
        if seen > 20:
            return None
        token = _HOME.sub("~", token)
        if any(fnmatchcase(target, token) for target in _GLOB_TARGETS):
            return word.end()
    return None


def _reads_globbed_store(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    end = glob_of_secret_store(text, m.end(), command_end(text, m.end()))
    return None if end is None else (m.start(), end)


_LINK_LOCAL = (169 << 24) | (254 << 16)
_ALIBABA_METADATA = (100 << 24) | (100 << 16) | (100 << 8) | 200
_NUMBER_PART = re.compile(r"0x[0-9a-f]{1,8}|0[0-7]{0,11}|[1-9][0-9]{0,9}")
_WILDCARD_DNS = re.compile(r"^(?P<ip>[0-9a-fx.-]{7,40})\.(?:nip\.io|sslip\.io|xip\.io|nip\.me)$")


def _ipv4_value(host: str) -> int | None:
    """The address a numeric host means to `inet_aton` (what curl and most resolvers use):
    1 to 4 parts, each decimal, octal (leading 0) or hex (0x), the last filling the rest."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_NUMBER_PART.fullmatch(p) for p in parts):
        return None
    values = [
        int(p, 16) if p.startswith("0x") else int(p, 8) if p[0] == "0" else int(p) for p in parts
    ]
    value = 0
    for v in values[:-1]:
        if v > 255:
            return None
        value = value << 8 | v
    rest = 8 * (4 - len(parts) + 1)
    if values[-1] >= 1 << rest:
        return None
    return value << rest | values[-1]


def _metadata_address(host: str) -> bool:
    """True for a disguised spelling of a cloud metadata address (169.254.0.0/16 written in
    decimal, hex, octal or short form; IPv4-mapped IPv6; AWS's IPv6 endpoint; a wildcard
    DNS name that resolves to it). The plain dotted form is left to the other checks."""
    host = host.strip("[]")
    if ":" in host:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return False
        if address == ipaddress.IPv6Address("fd00:ec2::254"):
            return True
        mapped = address.ipv4_mapped
        return mapped is not None and mapped.packed[:2] == b"\xa9\xfe"
    wildcard = _WILDCARD_DNS.match(host)
    if wildcard is not None:
        host = wildcard.group("ip").replace("-", ".")
    elif re.fullmatch(
        r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}", host
    ):
        return False
    value = _ipv4_value(host)
    return value is not None and (value >> 16 == _LINK_LOCAL >> 16 or value == _ALIBABA_METADATA)


def _reaches_metadata(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    return (m.start(), m.end()) if _metadata_address(m.group("host")) else None


def _copies_secret_store(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """`cp ~/.aws/credentials /tmp/c`: the first operand (what is copied) is a secret store;
    `cp .env.example .env` copies a template to where a secret store goes, which is fine."""
    end = command_end(text, m.end())
    operands = [w for w in args(text, m.end(), end) if not w.startswith("-")]
    if m.group().startswith("dd"):
        source = next((w[3:] for w in args(text, m.end(), end) if w.startswith("if=")), "")
    else:
        source = operands[0] if len(operands) >= 2 else ""
    source = _HOME.sub("~", source)
    if source and (
        _SECRET_STORE.search(source) or any(fnmatchcase(t, source) for t in _GLOB_TARGETS)
    ):
        return m.start(), end
    return None


_CREDENTIAL_FILE = re.compile(
    r"id_(?:rsa|dsa|ecdsa|ed25519|\*)|\*?\.pem$|\*?\.key$|\*?\.kdbx|\*?\.pfx|\*?\.p12|\*?\.ppk"
    r"|^\.?env$|^\*?\.env\*?$|credentials|\.netrc|\.git-credentials|\.pgpass|wallet\.dat|shadow"
    r"|secrets?\.(?:ya?ml|json|txt)"
)
_SECRET_WORD = re.compile(r"passw|secret|token|api_?key|apikey|private.key|aws_|credential")


def _hunts_credentials(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """`find / -name id_rsa`, `grep -ri password /etc`: a search of the root, a home or a
    system directory for credential files or secret words."""
    end = command_end(text, m.end())
    words = args(text, m.end(), end)
    if m.group() == "find":
        starts = []
        for w in words:
            if w.startswith(("-", "(", "!", "\\(")):
                break
            starts.append(w)
        names = [
            b for a, b in zip(words, words[1:], strict=False) if a in ("-name", "-iname", "-path")
        ]
        if any(dangerous_path(w) for w in starts) and any(
            _CREDENTIAL_FILE.search(n) for n in names
        ):
            return m.start(), end
        return None
    recursive = m.group() != "grep" or any(
        w.startswith("-") and not w.startswith("--") and "r" in w or w == "--recursive"
        for w in words
    )
    operands = [w for w in words if not w.startswith("-")]
    if (
        recursive
        and any(_SECRET_WORD.search(w) for w in operands)
        and any(dangerous_path(w) for w in operands)
    ):
        return m.start(), end
    return None


# `$PWD` is the working directory and `$key` a loop variable: a secret's name says so.
_SECRET_VAR = (
    r"\$\{?(?:env:)?[a-z0-9_]{0,40}"
    r"(?:secret|token|passw(?:or)?d|passwd|credential|creds|api_?key|_key(?![a-z]))"
)


def _prints_to_terminal(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    """`echo $AWS_SECRET_ACCESS_KEY` prints; `echo "$TOKEN" | gh auth login --with-token`
    and `echo "$KEY" > ~/.ssh/deploy` hand the secret to something that needs it."""
    end = command_end(text, m.end())
    if end < len(text) and text[end] == "|" or ">" in text[m.end() : end]:
        return None
    return m.start(), m.end()


HARVESTING_CHECKS: tuple[Check, ...] = (
    check(
        CATEGORY,
        "copies a credentials store (SSH private keys, cloud credentials, .env, /etc/shadow)",
        r"(?:cp|mv|rsync|install|scp|dd)(?=\s)",
        triggers="cp |mv |rsync|install|scp|dd ",
        post=_copies_secret_store,
        reads=command_end,
    ),
    check(
        CATEGORY,
        "reads or collects a credentials store named by a glob",
        r"(?:cat|bat|strings|xxd|od|hexdump|base64|tar|zip|7z|head|tail|less|more|nl|awk|grep"
        r"|sed|cut|sort|uniq|cp|scp)(?=\s)",
        triggers=("*", "?", "["),
        post=_reads_globbed_store,
    ),
    check(
        CATEGORY,
        "reads or collects a credentials store (SSH private keys, cloud credentials, .env, "
        "/etc/shadow)",
        r"(?:cat|bat|batcat|strings|xxd|od|hexdump|base64|get-content|gc|tar|zip|7z|7za|rar"
        r"|sqlite3|awk|gawk|unshadow|john|openssl|type|more|less|head|tail|nl|view)(?=\s)"
        r"|(?:open|fopen|readfile|readfilesync|read_text|file_get_contents)\s*\(",
        triggers=".ssh|.aws|netrc|credentials|.pgpass|.my.cnf|.npmrc|.pypirc|.s3cfg|.boto|config|.azure"
        "|.gnupg|.password-store|.vault-token|wallet.dat|.kdbx|.env|/etc/",
        post=_reads_secret_store,
    ),
    check(
        CATEGORY,
        "dumps passwords from the keychain or an OS credential store",
        r"security\s+(?:dump-keychain|find-(?:generic|internet)-password\b"
        r"[^\n;|&]{0,200}?\s-[a-z]*[wg](?![\w-]))"
        r"|mimikatz|sekurlsa::|lsadump::|secretsdump|lazagne"
        r"|reg(?:\.exe)?\s+save\s+hklm\\+(?:sam|security|system)\b"
        r"|vaultcmd(?:\.exe)?\s+/listcreds|procdump[^\n]{0,60}?lsass"
        r"|comsvcs(?:\.dll)?[^\n]{0,40}?minidump",
        triggers="security|mimikatz|lsa|secretsdump|lazagne|hklm|vaultcmd|minidump",
    ),
    check(
        CATEGORY,
        "reads a browser's cookie or password database",
        r"(?:google[/\\ ]chrome|google-chrome|chromium|bravesoftware|brave-browser"
        r"|microsoft[/\\ ]edge|microsoft-edge|opera\s+software|vivaldi|yandexbrowser)"
        r"[^\n\"'`]{0,160}?[/\\](?:cookies|login\s+data|web\s+data|local\s+state)(?![\w.-])"
        r"|[/\\](?:cookies\.sqlite|logins\.json|key[34]\.db|signons\.sqlite|cookies\.binarycookies)"
        r"(?![\w.-])",
        triggers="cookies|login|web|local|key3.db|key4.db|signons",
        word_start=False,
    ),
    check(
        CATEGORY,
        "lists secret environment variables",
        r"(?:env|printenv|set|export\s+-p|declare\s+-x|get-childitem\s+env:|gci\s+env:"
        r"|dir\s+env:|ls\s+env:)\s*\|\s*(?:grep|egrep|rg|findstr|select-string|sls|awk|sed)\b"
        r"[^\n|;&]{0,80}?(?:key|token|secret|passw|pwd|cred|aws|auth|session|cookie|private)",
        triggers=("|",),
    ),
    check(
        CATEGORY,
        "prints a secret environment variable",
        rf"(?:echo|printf|write-host|write-output)\s[^\n;|&>`]{{0,60}}?{_SECRET_VAR}\w*\}}?",
        triggers="$",
        post=_prints_to_terminal,
    ),
    check(
        CATEGORY,
        "prints the environment or a secret from it",
        r"(?:print|console\.log|puts|pp|write-host|write-output)\s*\(?\s*"
        r"(?:dict\(\s*os\.environ\s*\)|os\.environ|process\.env)(?:\s*\)|(?:\.get\(|\[|\.)\s*"
        r"[\"']?[a-z0-9_]{0,40}(?:key|token|secret|passw|cred))",
        triggers="environ|process.env",
    ),
    check(
        CATEGORY,
        "reads a process's environment, where its secrets are",
        r"/proc/(?:self|thread-self|\d+|\*|\$\$|\$\w+)/environ",
        triggers="/environ",
        word_start=False,
    ),
    check(
        CATEGORY,
        "collects secret environment variables",
        r"(?:for\s[^\n]{1,60}?\sin\s+(?:os\.environ|process\.env|dict\(os\.environ\)"
        r"|object\.(?:keys|entries)\(\s*process\.env\s*\))"
        r"|object\.(?:keys|entries)\(\s*process\.env\s*\)|get-childitem\s+env:|gci\s+env:)"
        r"[^\n]{0,160}?(?:key|token|secret|passw|cred)",
        triggers="environ|process.env|env:",
    ),
    check(
        CATEGORY,
        "reads credentials from the cloud metadata service or a service-account token",
        r"169\.254\.169\.254[^\s\"'`]{0,120}?(?:security-credentials|identity/oauth2/token)"
        r"|metadata\.google\.internal[^\s\"'`]{0,160}?/token|169\.254\.170\.2"
        r"|/var/run/secrets/kubernetes\.io/serviceaccount/token",
        triggers="169.254.|metadata.google|serviceaccount/token",
        word_start=False,
    ),
    check(
        CATEGORY,
        "reaches the cloud metadata service at a disguised address",
        r"(?:https?://(?:[^/\s@\"'`]{0,100}@)?|(?:curl|wget)\s+(?:-[a-z]+\s+){0,4})"
        r"(?P<host>\[[0-9a-f:.]{2,60}\]|[0-9a-fx.-]{1,60}(?:\.(?:nip|sslip|xip)\.(?:io|me))?)"
        r"(?=[/:\s\"'`)]|$)",
        triggers="http|curl|wget",
        post=_reaches_metadata,
    ),
    check(
        CATEGORY,
        "exports private keys",
        r"gpg2?\s[^\n;|&]{0,80}?--export-secret-(?:keys|subkeys)",
        triggers="--export-secret",
    ),
    check(
        CATEGORY,
        "searches the filesystem for credential files or passwords",
        r"(?:find|grep|egrep|rg|ag)(?=\s)",
        triggers="find|grep|rg |ag ",
        post=_hunts_credentials,
        reads=command_end,
    ),
)
