"""Stdio tool servers in a bubblewrap sandbox: no view of the hub's files, processes or secrets.

A stdio child runs as the hub's OS user. Cleaning its environment (`runtime.child_environment`)
keeps the hub's variables out of it, but without a sandbox it can still read what that user
can: `/proc/<hub pid>/environ` (every secret the hub was started with), `.env`,
`var/secret_key`, the SQLite database. With the sandbox (`TOOLSERVERS_SANDBOX`: `auto`, the
default, uses bubblewrap when it is installed and works; `bwrap` requires it; `off` never
uses it) the child runs in new user, pid, ipc, uts and cgroup namespaces with no
capabilities and sees only:

- `/usr` (and the `/bin`, `/lib*`, `/sbin` links or folders) read-only, a few files of
  `/etc` (name resolution, certificates, time zone, users) read-only;
- its executable's installation read-only: the virtualenv it lives in and that virtualenv's
  base Python, or the folder above its `bin/`;
- paths named in its arguments (`/srv/notes`, `--repository=/srv/repo`) and its working
  folder: folders read-write, files read-only;
- a fresh `/proc` of its own processes, a minimal `/dev`, an empty private `/tmp` (also its
  `HOME`).

A configured path that would show the hub's secrets (an ancestor of `.env`, the var folder,
the secret key or the SQLite file, or a path inside the var folder) is refused with an error
that says so. The network is shared: servers that call APIs still can.
"""

import functools
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

AUTO, BWRAP, OFF = "auto", "bwrap", "off"
MODES = (AUTO, BWRAP, OFF)
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/gai.conf",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/pki",
    "/etc/protocols",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/ssl",
    "/etc/timezone",
)
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ISOLATION = (
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)
# Tried in order by `usable_flags`: a user namespace as well where the kernel allows one
# (root in it has no power outside it), else without (bwrap installed setuid, user
# namespaces switched off).
FLAG_SETS = (("--unshare-user",) + ISOLATION, ISOLATION)
HOME = "/tmp"
PROBE_TIMEOUT_SECONDS = 10.0


class SandboxError(Exception):
    """The server cannot be run as configured in the sandbox (the text says why)."""


@dataclass(frozen=True)
class Wrapped:
    """What to spawn: bwrap and its arguments, or the command unchanged."""

    command: str
    args: tuple[str, ...]
    cwd: str | None
    sandboxed: bool


def mode() -> str:
    return settings.TOOLSERVERS_SANDBOX


def _base_args(flags: tuple[str, ...]) -> list[str]:
    args = list(flags)
    args += ["--ro-bind", "/usr", "/usr"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    return args


@functools.cache
def usable_flags() -> tuple[str, ...] | None:
    """The first of FLAG_SETS with which bwrap starts a process here (tried once per
    process), or None: bwrap missing or no namespaces allowed."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    for flags in FLAG_SETS:
        try:
            done = subprocess.run(  # noqa: S603 - fixed arguments
                [bwrap, *_base_args(flags), "--", "/usr/bin/env", "true"],
                capture_output=True,
                timeout=PROBE_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.warning("bwrap does not start here: %s", exc)
            continue
        if done.returncode == 0:
            return flags
        logger.warning("bwrap with %s fails here: %s", " ".join(flags), done.stderr.decode()[-300:])
    return None


def status() -> str:
    """One line for operators (the Tools page, `tool_server` commands): is it on?"""
    if mode() == OFF:
        return "off (TOOLSERVERS_SANDBOX=off): stdio servers see what the hub's user sees"
    if usable_flags() is None:
        if mode() == BWRAP:
            return "required but bwrap does not work here: stdio servers cannot start"
        return "bwrap not available: stdio servers see what the hub's user sees"
    return "bubblewrap: stdio servers see only their own installation and named paths"


def _hidden() -> list[Path]:
    """What a bound path must never show."""
    paths = [Path(settings.BASE_DIR) / ".env", Path(settings.VAR_DIR), settings.SECRET_KEY_FILE]
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3") and str(database["NAME"]) != ":memory:":
        paths.append(Path(database["NAME"]))
    return [Path(os.path.realpath(path)) for path in paths]


def _check_visible(path: Path, why: str) -> None:
    real = Path(os.path.realpath(path))
    for secret in _hidden():
        if real == secret or secret.is_relative_to(real) or real.is_relative_to(secret):
            raise SandboxError(
                f"the sandbox does not show {path} ({why}) to tool servers: it would show "
                "the hub's own files (its .env, var folder, secret key or database); name a "
                "folder outside them"
            )


def _install_roots(executable: str) -> list[Path]:
    """The folders an executable needs besides /usr: its virtualenv and that virtualenv's
    base Python, or the folder above its `bin/`; for the path as named and as resolved."""
    roots: list[Path] = []
    for path in dict.fromkeys((Path(executable), Path(os.path.realpath(executable)))):
        if path.is_relative_to("/usr"):
            continue
        folder = path.parent
        venv = folder.parent if (folder.parent / "pyvenv.cfg").is_file() else None
        if venv is not None:
            roots.append(venv)
            for line in (venv / "pyvenv.cfg").read_text(errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    home = Path(value.strip())
                    roots.append(home.parent if home.name == "bin" else home)
        else:
            roots.append(folder.parent if folder.name == "bin" else folder)
    return [root for root in roots if not root.is_relative_to("/usr")]


def _named_paths(args: tuple[str, ...], cwd: str | None) -> list[Path]:
    """Existing paths the arguments name (`/srv/x`, `--root=/srv/x`; relative ones from the
    working folder, if one is set: without one the child starts in its private /tmp)."""
    found = []
    for arg in args:
        for value in (arg, arg.partition("=")[2]):
            if not value or value.startswith("-") or "/" not in value:
                continue
            if not os.path.isabs(value) and not cwd:
                continue
            path = Path(cwd, value) if not os.path.isabs(value) else Path(value)
            if path.exists():
                found.append(Path(os.path.abspath(path)))
    return found


def wrap(command: str, args: tuple[str, ...], cwd: str | None) -> Wrapped:
    """`command args` as the sandbox runs it (or unchanged: sandbox off or unavailable in
    `auto`). SandboxError when it is required and does not work, or a configured path
    would show the hub's files."""
    plain = Wrapped(command, tuple(args), cwd, sandboxed=False)
    if mode() == OFF:
        return plain
    flags = usable_flags()
    if flags is None:
        if mode() == BWRAP:
            raise SandboxError(
                "TOOLSERVERS_SANDBOX=bwrap but bubblewrap is not installed or cannot create "
                "namespaces here (ask an operator)"
            )
        return plain
    executable = shutil.which(command) or command
    bwrap = ["--ro-bind", "--bind"]
    binds: list[str] = []
    for root in _install_roots(executable):
        _check_visible(root, "the server's installation")
        binds += [bwrap[0], str(root), str(root)]
    for path in _named_paths(args, cwd):
        _check_visible(path, "named in the server's arguments")
        binds += [bwrap[1] if path.is_dir() else bwrap[0], str(path), str(path)]
    if cwd:
        _check_visible(Path(cwd), "the server's working folder")
        binds += ["--bind", cwd, cwd]
    sandbox_args = [
        *_base_args(flags),
        *binds,
        "--setenv",
        "HOME",
        HOME,
        "--chdir",
        cwd or HOME,
        "--",
        executable,
        *args,
    ]
    return Wrapped(shutil.which("bwrap"), tuple(sandbox_args), None, sandboxed=True)
