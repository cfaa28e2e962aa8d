"""`make run` on the embedded defaults: no Redis, no PostgreSQL, just Python.

Starts the real supervisor (embedded Valkey + daphne + Celery worker) with a fresh var/
directory, logs in with the printed admin login, sees the chat list, and stops it all
with Ctrl-C (SIGINT). The supervisor restarts a process that exits (with backoff) and
kills what it left behind; a killed worker comes back and answers."""

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, build_opener

import pytest

from hermes_site.embedded_valkey import free_port
from hermes_site.runner import prepare_environment
from tests import database_template
from tests.live import MakeRun, processes_in_session

pytestmark = pytest.mark.heavy  # three tests start `make run` whole

BASE_DIR = Path(__file__).resolve().parent.parent


def wait_for_output(process, pattern: str, output: list[str], timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            if process.poll() is not None:
                break
            continue
        output.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r}; output so far:\n{''.join(output)}")


def test_make_run_serves_login_and_chat_list_on_embedded_defaults(tmp_path):
    port, valkey_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(HERMES_VAR_DIR=str(tmp_path / "var"), PORT=str(port), VALKEY_PORT=str(valkey_port))
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "hermes_site.runner"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    try:
        login = wait_for_output(process, r"admin login: (\S+) / (\S+)", output, timeout=120)
        wait_for_output(process, rf"Hermes Hub is up: http://127\.0\.0\.1:{port}/", output, 60)
        username, password = login.groups()
        assert (tmp_path / "var" / "hermes.sqlite3").exists(), "SQLite file under var/"

        opener = build_opener(HTTPCookieProcessor(CookieJar()))
        base = f"http://127.0.0.1:{port}"
        page = opener.open(f"{base}/accounts/login/", timeout=10).read().decode()
        assert "Log in" in page
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        body = urlencode(
            {"username": username, "password": password, "csrfmiddlewaretoken": token}
        ).encode()
        response = opener.open(f"{base}/accounts/login/", data=body, timeout=10)
        chat_list = response.read().decode()
        assert response.geturl() == f"{base}/"
        assert "<h1>Chats</h1>" in chat_list
        assert "htmx.min.js" in chat_list
        assert opener.open(f"{base}/static/vendor/htmx.min.js", timeout=10).status == 200

        # The web process bounds bodies before reading them (hermes_site.webserver): a 300 MB
        # declaration is answered 413 although no byte of the body was sent.
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(
                b"POST /api/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Length: 314572800\r\n\r\n"
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 413 ")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError("Ctrl-C did not stop `make run` within 30 s") from None
    leftovers = processes_in_session(process.pid)
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"


def test_make_run_generates_the_secret_key_once_readable_by_its_owner_only(tmp_path, monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)  # this run's: keep it
    monkeypatch.setenv("HERMES_VAR_DIR", str(tmp_path))

    key = prepare_environment()["SECRET_KEY"]
    key_file = tmp_path / "secret_key"
    assert len(key) >= 50
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert prepare_environment()["SECRET_KEY"] == key  # the next `make run` keeps it


def test_make_run_gives_its_processes_one_metrics_directory_emptied_at_start(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "k")
    monkeypatch.setenv("HERMES_VAR_DIR", str(tmp_path))
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    stale = tmp_path / "prometheus" / "counter_12345.db"
    stale.parent.mkdir()
    stale.write_bytes(b"an earlier run's counts")
    env = prepare_environment()
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "prometheus")
    assert not stale.exists()
    # A directory the operator set is used as it is, never emptied.
    own = tmp_path / "mine"
    own.mkdir()
    (own / "counter_1.db").write_bytes(b"theirs")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(own))
    assert prepare_environment()["PROMETHEUS_MULTIPROC_DIR"] == str(own)
    assert (own / "counter_1.db").exists()


def test_the_telegram_bridge_runs_only_when_a_token_is_configured():
    from hermes_site.runner import processes

    without = processes({"PORT": "8000"})
    assert set(without) == {"valkey", "web", "worker", "background"}
    with_token = processes({"PORT": "8000", "TELEGRAM_BOT_TOKEN": "123:abc"})
    assert set(with_token) == {"valkey", "web", "worker", "background", "telegram"}
    assert with_token["telegram"][-2:] == ["manage.py", "run_telegram_bot"]
    on_redis = processes({"PORT": "8000", "REDIS_URL": "redis://127.0.0.1:6379/0"})
    assert "valkey" not in on_redis


# --- the supervisor ---------------------------------------------------------------------

SUPERVISE = """
import sys
from hermes_site.supervisor import Program, Supervisor
programs = [
    Program(name, [sys.executable, "-u", "-c", code], ready_line=ready)
    for name, code, ready in {programs!r}
]
sys.exit(Supervisor(programs, env=None, cwd=".").run())
"""
PARENT_OF_A_CHILD = (
    "import subprocess, time; child = subprocess.Popen(['sleep', '600']); "
    "print('child', child.pid, flush=True); time.sleep(600)"
)


def supervise(ready_lines: dict[str, str] | None = None, **programs: str) -> MakeRun:
    ready_lines = ready_lines or {}
    listed = [(name, code, ready_lines.get(name)) for name, code in programs.items()]
    code = SUPERVISE.format(programs=listed)
    return MakeRun(dict(os.environ), argv=[sys.executable, "-u", "-c", code])


def gone(pid: int, timeout: float = 15) -> bool:
    """Whether `pid` stops existing (or is a zombie) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_the_supervisor_restarts_a_killed_process_and_kills_what_it_left_behind():
    run = supervise(sleeper=PARENT_OF_A_CHILD, other="import time; time.sleep(600)")
    try:
        match, _ = run.wait_for(r"sleeper\s*\| child (\d+)", 30)
        child, leader, other = int(match.group(1)), run.pid("sleeper"), run.pid("other")
        mark = run.mark()
        os.kill(leader, signal.SIGKILL)

        run.wait_for(
            rf"sleeper \(pid {leader}\) exited with signal 9 .*restarting in 1 s", 30, mark
        )
        run.wait_for(r"started sleeper \(pid \d+\)", 30, mark)
        run.wait_for(r"sleeper\s*\| child \d+", 30, mark)
        assert run.pid("sleeper") != leader
        assert gone(child), "the killed process's child must not outlive it"
        assert run.pid("other") == other, "the other processes keep running"
        assert run.process.poll() is None
    finally:
        leftovers = run.stop()
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"
    assert "stopping" in run.output()


def test_a_process_that_keeps_failing_is_restarted_with_growing_delays():
    run = supervise(broken="import sys; print('broken config', flush=True); sys.exit(3)")
    try:
        for delay in (1, 2, 4):
            run.wait_for(rf"broken \(pid \d+\) exited with status 3 .*restarting in {delay} s", 60)
        assert run.output().count("broken config") >= 3
    finally:
        leftovers = run.stop()
    assert leftovers == []


def test_a_process_that_started_properly_is_restarted_after_one_second_each_time():
    # It crashes three seconds after saying it is ready, again and again: crashes, not a
    # failure to start, so no growing delay (a worker killed soon after its start).
    crash = "import time; print('ready.', flush=True); time.sleep(3); raise SystemExit(1)"
    run = supervise(ready_lines={"crashy": r"ready\.$"}, crashy=crash)
    try:
        for _ in range(3):
            _, index = run.wait_for(r"crashy \(pid \d+\) exited with status 1 ", 60, run.mark())
            assert run.lines[index].endswith("restarting in 1 s"), run.lines[index]
    finally:
        leftovers = run.stop()
    assert leftovers == []


def _post(base: str, token: str, message_id: str, text: str) -> dict:
    request = urllib.request.Request(
        f"{base}/api/v1/messages",
        data=json.dumps(
            {"chat_id": "ops", "user_id": "u1", "message_id": message_id, "text": text}
        ).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        return json.loads(response.read())["turn"]


def _wait_answered(base: str, token: str, turn_id: int, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(
            f"{base}/api/v1/turns/{turn_id}", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            turn = json.loads(response.read())["turn"]
        if turn["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return turn
        time.sleep(0.2)


def test_make_run_restarts_a_killed_worker_which_then_answers(tmp_path, fake_llm):
    port, valkey_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        HERMES_VAR_DIR=str(tmp_path / "var"),
        PORT=str(port),
        VALKEY_PORT=str(valkey_port),
        LLM_PROVIDER="openai",
        LLM_BASE_URL=fake_llm.base_url,
        LLM_MODEL="fake-model",
        LLM_RETRY_BASE_SECONDS="0",
    )
    fake_llm.script("first answer", "second answer")
    # Migrated already: the first test here is the one that starts on an empty var/.
    database_template.migrated_sqlite_copy(tmp_path / "var" / "hermes.sqlite3")
    run = MakeRun(env)
    try:
        login, _ = run.wait_for(r"admin login: (\S+) / (\S+)", 120)
        run.wait_for(r"worker\s*\|.* ready\.", 120)
        run.wait_for(rf"Hermes Hub is up: http://127\.0\.0\.1:{port}/", 60)
        base = f"http://127.0.0.1:{port}"
        token = subprocess.run(
            [sys.executable, "manage.py", "create_api_token", login.group(1)],
            cwd=BASE_DIR,
            env=env,  # a second terminal: the key comes from var/secret_key
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert (
            _wait_answered(base, token, _post(base, token, "m-1", "hello")["id"])["status"]
            == "completed"
        )

        worker, background = run.pid("worker"), run.pid("background")
        # The embedded layout runs turns in threads: no pool processes (split: prefork).
        pool = subprocess.run(
            ["pgrep", "-P", str(worker)], capture_output=True, text=True
        ).stdout.split()
        mark = run.mark()
        os.kill(worker, signal.SIGKILL)  # the main process only, as the OOM killer might

        run.wait_for(rf"worker \(pid {worker}\) exited with signal 9 .*restarting in", 30, mark)
        run.wait_for(r"started worker \(pid \d+\)", 60, mark)
        run.wait_for(r"worker\s*\|.* ready\.", 120, mark)
        assert run.pid("worker") != worker
        assert all(gone(int(pid)) for pid in pool), "the dead worker's pool processes are gone"
        assert run.pid("background") == background, "the background worker kept running"
        assert run.process.poll() is None

        answered = _wait_answered(base, token, _post(base, token, "m-2", "are you back?")["id"])
        assert answered["status"] == "completed"
        assert answered["reply"]["text"] == "second answer"
    finally:
        leftovers = run.stop()
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"


def test_the_embedded_layout_keeps_reviews_and_the_dispatcher_off_the_turn_worker():
    from hermes_site.runner import processes

    procs = processes({"PORT": "8000", "REDIS_KEY_PREFIX": "hub", "CELERY_CONCURRENCY": "3"})
    worker, background = procs["worker"], procs["background"]
    # Turns: threads in one process, beat a thread of it; only the default (turns') queue.
    assert worker[worker.index("--pool") + 1] == "threads"
    assert worker[worker.index("--concurrency") + 1] == "3"
    assert "--beat-thread" in worker and "-B" not in worker
    assert "-Q" not in worker  # CELERY_TASK_DEFAULT_QUEUE: the prefix, turns only
    # Reviews, the dispatcher, files and transcription: their own process and queues, never a
    # turn's slot; a review, a file, a recording and a knowledge job take one thread each at
    # most, so the dispatcher finds the fifth.
    assert background[background.index("-Q") + 1] == "hub-reviews,hub-schedules,hub-files,hub-voice"
    assert background[background.index("--pool") + 1] == "threads"
    assert background[background.index("--concurrency") + 1] == "5"


def test_the_split_layout_stays_selectable():
    from hermes_site.runner import processes

    procs = processes({"PORT": "8000", "HERMES_PROCESS_LAYOUT": "split"})
    assert set(procs) == {"valkey", "web", "worker", "reviews", "schedules"}
    assert "-B" in procs["worker"]
    assert procs["schedules"][procs["schedules"].index("--pool") + 1] == "solo"
