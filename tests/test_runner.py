"""`make run` on the embedded defaults: no Redis, no PostgreSQL, just Python.

Starts the real supervisor (embedded Valkey + daphne + Celery worker) with a fresh var/
directory, logs in with the printed admin login, sees the chat list, and stops it all
with Ctrl-C (SIGINT)."""

import os
import re
import signal
import subprocess
import sys
import time
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, build_opener

from hermes_site.embedded_valkey import free_port

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
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError("Ctrl-C did not stop `make run` within 30 s") from None
    leftovers = subprocess.run(
        ["pgrep", "-s", str(process.pid)], capture_output=True, text=True
    ).stdout.split()
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"


def test_the_telegram_bridge_runs_only_when_a_token_is_configured():
    from hermes_site.runner import processes

    without = processes({"PORT": "8000"})
    assert set(without) == {"valkey", "web", "worker"}
    with_token = processes({"PORT": "8000", "TELEGRAM_BOT_TOKEN": "123:abc"})
    assert set(with_token) == {"valkey", "web", "worker", "telegram"}
    assert with_token["telegram"].endswith("manage.py run_telegram_bot")
    on_redis = processes({"PORT": "8000", "REDIS_URL": "redis://127.0.0.1:6379/0"})
    assert "valkey" not in on_redis
