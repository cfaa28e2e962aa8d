"""The process supervisor of `make run`: start every process, restart one that exits, stop
them all on Ctrl-C.

- Output: each process's lines, prefixed with the time and its name; the supervisor's own
  lines (started, exited, restarting) under the name `supervisor`.
- A process that exits while the hub runs is restarted: after 1 s when it had started
  properly (it printed its ready line, e.g. the worker's "ready.", or, without one, ran
  STARTUP_SECONDS), as after a crash or an OOM kill; with a delay that doubles up to 30 s
  while it keeps exiting before that (a configuration error), so a crash loop neither
  spins the CPU nor floods the log. Every exit is logged with its status and the delay.
- What the exited process left behind in its process group (a Celery worker's pool
  children, its embedded beat) is killed before the restart: an orphan pool child could
  otherwise finish a turn that the restarted worker has already marked interrupted.
- Ctrl-C (SIGINT) or SIGTERM: nothing is restarted any more; every process gets SIGTERM
  (Redis last, so the others can still talk to it while they stop), and whatever is still
  running after STOP_TIMEOUT_SECONDS is killed with its process group.

Each process runs in a process group of its own, so Ctrl-C in the terminal reaches only the
supervisor, which then stops the processes in order.
"""

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

MIN_RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0
# Without a ready line, a process that exits sooner than this counts as failing to start.
STARTUP_SECONDS = 5.0
STOP_TIMEOUT_SECONDS = 15.0
POLL_SECONDS = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore(signum, frame) -> None:
    """A Python-level handler, so that the signal reaches the wakeup fd."""


@dataclass
class Program:
    """One supervised process. `ready(program)` (optional) blocks until it can serve; the
    programs after it start only then (the embedded Redis before its clients).
    `ready_line` (a regex, optional): the output line that shows it started properly."""

    name: str
    argv: list[str]
    ready: Callable[["Program"], None] | None = None
    ready_line: str | None = None
    stop_last: bool = False
    up: bool = False  # started properly (see the module docstring)
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    quick_exits: int = 0
    restart_at: float | None = None
    readers: list[threading.Thread] = field(default_factory=list)


def restart_delay(quick_exits: int) -> float:
    """Seconds before a restart, after `quick_exits` exits in a row within STARTUP_SECONDS."""
    return min(MIN_RESTART_DELAY * 2**quick_exits, MAX_RESTART_DELAY)


class Supervisor:
    def __init__(self, programs: list[Program], *, env: dict, cwd: str, out: TextIO = sys.stdout):
        self.programs = programs
        self.env = env
        self.cwd = cwd
        self.out = out
        self.width = max(len(p.name) for p in programs + [Program("supervisor", [])])
        self.lock = threading.Lock()
        # A plain flag: the signal handler must not take a lock the main thread may hold.
        self.stop_requested = False

    # output

    def emit(self, name: str, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        with self.lock:
            self.out.write(f"{stamp} {name:<{self.width}} | {text}\n")
            self.out.flush()

    def say(self, text: str) -> None:
        self.emit("supervisor", text)

    def _pump(self, program: Program, stream) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            if program.ready_line and not program.up and re.search(program.ready_line, line):
                program.up = True
            self.emit(program.name, line)
        stream.close()

    # lifecycle

    def start(self, program: Program) -> None:
        program.process = subprocess.Popen(
            program.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        program.started_at = time.monotonic()
        program.restart_at = None
        program.up = False
        reader = threading.Thread(
            target=self._pump, args=(program, program.process.stdout), daemon=True
        )
        reader.start()
        program.readers = [reader]
        self.say(f"started {program.name} (pid {program.process.pid})")

    def _kill_group(self, program: Program) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(program.process.pid, signal.SIGKILL)

    def _on_exit(self, program: Program) -> None:
        status = program.process.returncode
        uptime = time.monotonic() - program.started_at
        self._kill_group(program)  # pool children, embedded beat: never orphans
        started = program.up if program.ready_line else uptime >= STARTUP_SECONDS
        if not started:
            delay = restart_delay(program.quick_exits)
            program.quick_exits += 1
        else:
            program.quick_exits = 0
            delay = restart_delay(0)
        how = f"signal {-status}" if status < 0 else f"status {status}"
        self.say(
            f"{program.name} (pid {program.process.pid}) exited with {how} after "
            f"{uptime:.1f} s; restarting in {delay:g} s"
        )
        program.restart_at = time.monotonic() + delay

    def run(self) -> int:
        """Supervise until SIGINT or SIGTERM; then stop everything. Returns 0."""
        # Wake up the moment a child exits or Ctrl-C comes (any handled signal writes to the
        # wakeup fd), not at the next poll: a dead worker's pool processes are killed at once
        # instead of streaming on for a turn the restarted worker marks interrupted.
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        previous_fd = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        previous = {sig: signal.signal(sig, self._request_stop) for sig in STOP_SIGNALS}
        previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, _ignore)
        try:
            for program in self.programs:
                if self.stop_requested:
                    break
                self.start(program)
                if program.ready:
                    program.ready(program)
            while not self.stop_requested:
                if select.select([wake_r], [], [], POLL_SECONDS)[0]:
                    with contextlib.suppress(BlockingIOError):
                        wake_r.recv(4096)
                self._check(time.monotonic())
        finally:
            self.stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_fd)
            wake_r.close()
            wake_w.close()
        return 0

    def _check(self, now: float) -> None:
        for program in self.programs:
            if program.process is None or self.stop_requested:
                continue
            if program.restart_at is None and program.process.poll() is not None:
                self._on_exit(program)
            elif program.restart_at is not None and now >= program.restart_at:
                self.start(program)

    def _request_stop(self, signum, frame) -> None:
        self.stop_requested = True

    def stop_all(self) -> None:
        self.stop_requested = True
        self.say("stopping")
        running = [p for p in self.programs if p.process and p.process.poll() is None]
        first = [p for p in running if not p.stop_last]
        last = [p for p in running if p.stop_last]
        for group in (first, last):
            for program in group:
                with contextlib.suppress(ProcessLookupError):
                    program.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
            for program in group:
                try:
                    program.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.say(f"{program.name} did not stop in time: killed")
        # Groups of processes that exited earlier were killed then (_on_exit).
        for program in running:
            self._kill_group(program)
            program.process.wait()
        for program in self.programs:
            for reader in program.readers:
                reader.join(timeout=2)
