"""The Telegram bridge as a real process for end-to-end tests, next to the live stack
(daphne + Celery worker, tests/live.py) and the fake Bot API server."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.telegram_server import FakeTelegram
from tests.live import LiveStack

BASE_DIR = Path(__file__).resolve().parent.parent.parent


class BotProcess:
    """`manage.py run_telegram_bot` on the live stack's database, Redis and settings."""

    def __init__(self, stack: LiveStack, fake: FakeTelegram, extra_env: dict | None = None):
        self.env = {**stack.env, **fake.env(), **(extra_env or {})}
        self.log = stack.logs / f"telegram-{os.getpid()}.log"
        self.process: subprocess.Popen | None = None
        self._offset = 0

    def start(self, timeout: float = 60) -> None:
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        log = open(self.log, "ab")  # noqa: SIM115 - owned by Popen
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "run_telegram_bot"],
            cwd=BASE_DIR,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Telegram bridge running" in self.output():
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"the bot exited:\n{self.output()}")
            time.sleep(0.1)
        raise RuntimeError(f"the bot did not start within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        if not self.log.exists():
            return ""
        return self.log.read_bytes()[self._offset :].decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: the bot dies mid-whatever, as in a crash."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
