"""The real product's processes for end-to-end tests: daphne and a Celery worker started as
subprocesses against the test database, the test Redis and a fake model server.

Use through the `live_stack` fixture (tests/conftest.py) in `transactional_db` tests, so
what the test writes is committed and visible to the subprocesses.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import connection

from hermes_site.embedded_valkey import free_port

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def database_url_for_subprocesses() -> str:
    """The URL of the database this test run uses (pytest-django's test database)."""
    db = settings.DATABASES["default"]
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


# How long a process may take to start: a bound, not a measure. Under `make test`'s parallel
# workers on 2 cores, importing Django and the apps alone can take many times what it takes
# alone.
START_BOUND_SECONDS = 120


class LiveStack:
    def __init__(self, *, llm_base_url: str | None, worker_name: str, extra_env=None):
        self.port = free_port()
        self.worker_name = worker_name
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url_for_subprocesses(),
            "REDIS_URL": settings.REDIS_URL,
            "REDIS_KEY_PREFIX": settings.REDIS_KEY_PREFIX,
            "SECRET_KEY": settings.SECRET_KEY,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            "LLM_CONTEXT_TOKENS": str(settings.LLM_CONTEXT_TOKENS),
            "LLM_RETRY_BASE_SECONDS": "0",
            "LLM_TIMEOUT_SECONDS": "10",
            **(extra_env or {}),
        }
        if llm_base_url:
            self.env.update(
                LLM_PROVIDER="openai", LLM_BASE_URL=llm_base_url, LLM_MODEL="fake-model"
            )
        else:
            self.env["LLM_PROVIDER"] = "none"
        self.logs = BASE_DIR / "var" / "test-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.web: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.dispatcher: subprocess.Popen | None = None
        # Where each process's log stood when it was last started: the logs are appended per
        # test process, so an earlier test's "ready" must not pass for this start's.
        self._log_offsets: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        path = self.logs / f"{name}-{os.getpid()}.log"
        self._log_offsets[name] = path.stat().st_size if path.exists() else 0
        log = open(path, "ab")  # noqa: SIM115 - owned by Popen
        return subprocess.Popen(
            command,
            cwd=BASE_DIR,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_web(self) -> None:
        self.web = self._spawn(
            "daphne",
            [
                sys.executable,
                "-m",
                "hermes_site.webserver",  # daphne with bounded request bodies, as `make run`
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "hermes_site.asgi:application",
            ],
        )
        # A bound, not a measure: under `make test`'s parallel workers on 2 cores a start
        # can take several times what it takes alone.
        deadline = time.monotonic() + START_BOUND_SECONDS
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=5)
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.web.poll() is not None:
                    raise RuntimeError(f"daphne exited; see {self.logs}") from None
                time.sleep(0.1)
        raise RuntimeError(f"daphne did not start within {START_BOUND_SECONDS} s")

    def restart_web(self) -> None:
        """Stop daphne hard (every WebSocket drops) and start it again on the same port."""
        os.killpg(self.web.pid, signal.SIGKILL)
        self.web.wait(timeout=10)
        self.start_web()

    def start_worker(
        self,
        *,
        pool: str = "solo",
        concurrency: int = 1,
        extra_queues: tuple[str, ...] = ("files", "voice"),
        wait: bool = True,
    ) -> None:
        """`pool="prefork"` runs the worker as `make run` does: tasks in child processes,
        acknowledged by the parent. `extra_queues`: suffixes of other queues it consumes too
        (by default "files" and "voice", "<prefix>-files" and "<prefix>-voice": a stack's
        documents are read and its recordings transcribed, so a turn that waits for its files
        does not wait out its bound). `wait=False` returns once it is started
        (`wait_for_log("worker", "ready", ...)` then), so daphne can start meanwhile."""
        self.worker = self._spawn(
            "worker",
            [
                str(BIN / "celery"),
                "-A",
                "hermes_site",
                "worker",
                "--pool",
                pool,
                "--concurrency",
                str(concurrency),
                "--loglevel",
                "INFO",
                "-Q",
                ",".join(
                    [settings.REDIS_KEY_PREFIX]
                    + [f"{settings.REDIS_KEY_PREFIX}-{name}" for name in extra_queues]
                ),
                "-n",
                self.worker_name,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )
        if wait:
            self.wait_for_log("worker", "ready", START_BOUND_SECONDS)

    def start_dispatcher(self) -> None:
        """The schedules worker as `make run` starts it: the dispatcher's own queue, a solo
        pool, apart from the worker that runs turns."""
        self.dispatcher = self._spawn(
            "dispatcher",
            [
                str(BIN / "celery"),
                "-A",
                "hermes_site",
                "worker",
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "-Q",
                f"{settings.REDIS_KEY_PREFIX}-schedules",
                "-n",
                f"schedules-{self.worker_name}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )
        self.wait_for_log("dispatcher", "ready", START_BOUND_SECONDS)

    def wait_for_log(self, name: str, text: str, timeout: float) -> None:
        """Wait until the process started last as `name` logs `text`."""
        path = self.logs / f"{name}-{os.getpid()}.log"
        deadline = time.monotonic() + timeout
        start = self._log_offsets.get(name, 0)
        while time.monotonic() < deadline:
            if path.exists():
                with open(path, "rb") as log:
                    log.seek(start)
                    if text in log.read().decode(errors="replace"):
                        return
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not log {text!r} within {timeout} s")

    def kill_worker(self) -> None:
        """SIGKILL: the worker dies mid-whatever, as in a crash or an OOM kill."""
        os.killpg(self.worker.pid, signal.SIGKILL)
        self.worker.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM to every process at once (each shuts down in parallel with the others),
        then SIGKILL to any still running 10 s later."""
        running = [
            process
            for process in (self.web, self.worker, self.dispatcher)
            if process is not None and process.poll() is None
        ]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def processes_in_session(session_id: int) -> list[str]:
    """ "pid command" of the live processes of a session; zombies (killed, waiting for the
    init process to reap them) are not running and do not count."""
    listing = subprocess.run(
        ["ps", "-o", "pid=,stat=,args=", "-s", str(session_id)], capture_output=True, text=True
    ).stdout.splitlines()
    live = []
    for line in listing:
        pid, stat, *args = line.split(None, 2)
        if not stat.startswith("Z"):
            live.append(" ".join([pid, *args]))
    return live


class MakeRun:
    """`make run` itself (hermes_site.runner: the supervisor and every process it starts) as
    a subprocess, with its output collected line by line so a test can wait for a line and
    find the pid of a supervised process."""

    def __init__(self, env: dict[str, str], argv: list[str] | None = None):
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            argv or [sys.executable, "-u", "-m", "hermes_site.runner"],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        logs = BASE_DIR / "var" / "test-logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"make-run-{os.getpid()}.log", "a") as log:  # appended per test run
            for line in self.process.stdout:
                log.write(line)
                with self._changed:
                    self.lines.append(line.rstrip("\n"))
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def output(self, start: int = 0) -> str:
        with self._changed:
            return "\n".join(self.lines[start:])

    def wait_for(self, pattern: str, timeout: float, start: int = 0):
        """The first line from index `start` on matching `pattern` (a regex), and its index."""
        deadline = time.monotonic() + timeout
        checked = start
        with self._changed:
            while True:
                while checked < len(self.lines):
                    match = re.search(pattern, self.lines[checked])
                    if match:
                        return match, checked
                    checked += 1
                remaining = deadline - time.monotonic()
                finished = self.process.poll() is not None and not self._reader.is_alive()
                if remaining <= 0 or finished:
                    break
                self._changed.wait(min(remaining, 0.2))
            tail = "\n".join(self.lines[-60:])
        raise AssertionError(f"no line matching {pattern!r} in {timeout} s; output:\n{tail}")

    def mark(self) -> int:
        """The index of the next line (wait for what happens after this point)."""
        with self._changed:
            return len(self.lines)

    def pid(self, name: str) -> int:
        """The pid of the running `name` process, as the supervisor last announced it."""
        with self._changed:
            for line in reversed(self.lines):
                match = re.search(rf"supervisor\s*\| started {name} \(pid (\d+)\)", line)
                if match:
                    return int(match.group(1))
        raise AssertionError(f"the supervisor never started {name}")

    def stop(self, timeout: float = 40) -> list[str]:
        """Ctrl-C (SIGINT) and wait; returns the processes left in its session ("pid command")."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                raise AssertionError(f"Ctrl-C did not stop `make run` within {timeout} s") from None
        self._reader.join(timeout=5)
        leftovers = processes_in_session(self.process.pid)
        for line in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        return leftovers
