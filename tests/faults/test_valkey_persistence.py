"""The embedded Valkey of `make run` keeps the broker's queue across a restart (its
append-only file under var/valkey): a turn queued when the hub stops is still queued, in
Redis too, when it starts again."""

import os
import signal
import subprocess
import sys

import redis
from kombu import Connection

from hermes_site.celery import app
from hermes_site.embedded_valkey import BASE_DIR, free_port, wait_until_ready


def start_make_run_valkey(var_dir, port) -> subprocess.Popen:
    """The server exactly as `make run` starts it (hermes_site.runner's `valkey` process)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hermes_site.embedded_valkey", "--port", str(port)],
        cwd=BASE_DIR,
        env={**os.environ, "HERMES_VAR_DIR": str(var_dir)},
        stdout=subprocess.DEVNULL,
    )
    wait_until_ready(port, process)
    return process


def test_a_queued_turn_survives_a_crash_of_make_runs_valkey(tmp_path, settings):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = start_make_run_valkey(tmp_path / "var", port)
    try:
        with Connection(url, transport=settings.CELERY_BROKER_TRANSPORT) as connection:
            app.send_task("chats.tasks.run_turn", args=[42], connection=connection)
        queue = app.conf.task_default_queue
        assert redis.Redis.from_url(url).llen(queue) == 1
        os.kill(server.pid, signal.SIGKILL)  # a crash: no shutdown save
        server.wait()
        server = start_make_run_valkey(tmp_path / "var", port)
        assert redis.Redis.from_url(url).llen(queue) == 1, "the queued task was lost"
        assert (tmp_path / "var" / "valkey" / "appendonlydir").is_dir()
    finally:
        server.kill()
        server.wait()
