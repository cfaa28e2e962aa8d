"""Request bodies at the web server: plain daphne against the hub's server (hermes_site.webserver).

    .venv/bin/python bench/body_limit_bench.py [--posts 300] [--runs 3] [--skip-huge]

Starts both servers side by side on one fresh SQLite database and the Redis of REDIS_URL,
each with a temporary directory of its own, then measures:

- small POSTs: `--posts` authenticated `POST /api/v1/messages` (a ~200-byte JSON message,
  201 each) one after the other on one keep-alive connection; the two servers take turns,
  `--runs` times each, so load from elsewhere hits both alike. Reported: requests per second
  and the median latency, median over the runs.
- a 300 MB body without a key: headers declaring 300 MB, then the client sends as fast as
  the server takes it. Reported: how long until the answer, what the client got to send,
  the server's resident memory before and after, and the largest file it spooled.
"""

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import (  # noqa: E402
    machine_info,
    markdown_table,
    median,
    setup_django,
    temporary_database,
)
from ws_bench import Processes, free_port  # noqa: E402

BIN = Path(sys.executable).parent
HUGE = 300 * 1024 * 1024
SERVERS = {
    "daphne (before)": [str(BIN / "daphne")],
    "hermes_site.webserver (after)": [sys.executable, "-m", "hermes_site.webserver"],
}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def spooled_bytes(pid: int, temp_dir: str) -> int:
    """Size of the files `pid` holds open under `temp_dir` (spooled bodies, unlinked)."""
    total = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(temp_dir):
                total += fd.stat().st_size
    return total


def small_posts(port: int, token: str, count: int, run: int) -> tuple[float, float]:
    """Requests per second and median latency (ms) of `count` small authenticated POSTs."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies = []
    started = time.perf_counter()
    for index in range(count):
        body = json.dumps(
            {
                "chat_id": f"bench-{port}",
                "user_id": "u1",
                "message_id": f"r{run}-m{index}",
                "text": "a short message of an ordinary size " * 4,
                "respond": False,
            }
        )
        sent = time.perf_counter()
        connection.request("POST", "/api/v1/messages", body, headers)
        response = connection.getresponse()
        response.read()
        if response.status != 201:
            raise SystemExit(f"POST answered {response.status}")
        latencies.append((time.perf_counter() - sent) * 1000)
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed, median(latencies)


def huge_body(pid: int, port: int, temp_dir: str) -> dict[str, object]:
    rss_before = rss_kib(pid)
    peak_spool = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak_spool
        while not done.is_set():
            peak_spool = max(peak_spool, spooled_bytes(pid, temp_dir))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    sent = 0
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(
            f"POST /api/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {HUGE}\r\n\r\n".encode()
        )
        piece = b" " * (1024 * 1024)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while sent < HUGE:
                sock.sendall(piece)
                sent += len(piece)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer:
                    break
    elapsed = time.perf_counter() - started
    done.set()
    watcher.join()
    time.sleep(1)  # let the server finish with the connection before reading its memory
    return {
        "status": answer.split(b" ", 2)[1].decode() if answer else "none",
        "seconds": elapsed,
        "sent_mib": sent / 1024 / 1024,
        "rss_before_mib": rss_before / 1024,
        "rss_after_mib": rss_kib(pid) / 1024,
        "spooled_mib": peak_spool / 1024 / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-huge", action="store_true")
    args = parser.parse_args()

    with (
        temporary_database(label="body") as database_url,
        tempfile.TemporaryDirectory(prefix="hermes-body-bench-") as work,
    ):
        setup_django(database_url)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url},
            check=True,
        )
        from django.contrib.auth import get_user_model

        from chats.services import api_token_create

        person = get_user_model().objects.create_user("bench", password="x")
        _, token = api_token_create(person=person, name="bench")

        started: dict[str, tuple[int, int, str]] = {}
        processes = []
        try:
            for index, (name, command) in enumerate(SERVERS.items()):
                temp_dir = Path(work) / f"tmp-{index}"
                temp_dir.mkdir()
                env = {
                    **os.environ,
                    "DATABASE_URL": database_url,
                    "LLM_PROVIDER": "none",
                    "LOG_LEVEL": "WARNING",
                    "TMPDIR": str(temp_dir),
                    "API_RATE_LIMIT_PER_MINUTE": "0",
                }
                logs = Path(work) / f"logs-{index}"
                logs.mkdir()
                group = Processes(env, logs)
                processes.append(group)
                port = free_port()
                process = group.spawn(
                    "web",
                    [
                        *command,
                        "-b",
                        "127.0.0.1",
                        "-p",
                        str(port),
                        "--access-log",
                        os.devnull,
                        "hermes_site.asgi:application",
                    ],
                )
                group.wait_for_port(name, port, 120)
                started[name] = (process.pid, port, str(temp_dir))
            for _pid, port, _temp in started.values():
                small_posts(port, token, 20, run=-1)  # warm-up: imports, connections
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in started}
            for run in range(args.runs):
                for name, (_pid, port, _temp) in started.items():
                    results[name].append(small_posts(port, token, args.posts, run))
            huge = {}
            if not args.skip_huge:
                for name, (pid, port, temp_dir) in started.items():
                    huge[name] = huge_body(pid, port, temp_dir)
        finally:
            for group in processes:
                group.stop()

    print(", ".join(f"{key}: {value}" for key, value in machine_info().items()))
    print(f"{args.posts} small POSTs per run, {args.runs} runs per server, alternating\n")
    rows = []
    for name, runs in results.items():
        rates = [rate for rate, _ in runs]
        latencies = [latency for _, latency in runs]
        rows.append(
            [
                name,
                f"{median(rates):.0f}",
                " / ".join(f"{rate:.0f}" for rate in rates),
                f"{median(latencies):.2f}",
            ]
        )
    print(markdown_table(["server", "POST/s (median)", "POST/s per run", "p50 ms"], rows))
    if huge:
        print("\n300 MB declared body without a key to /api/v1/messages")
        rows = [
            [
                name,
                outcome["status"],
                f"{outcome['seconds']:.2f}",
                f"{outcome['sent_mib']:.0f}",
                f"{outcome['rss_before_mib']:.0f} → {outcome['rss_after_mib']:.0f}",
                f"{outcome['spooled_mib']:.0f}",
            ]
            for name, outcome in huge.items()
        ]
        print(
            markdown_table(
                ["server", "answer", "seconds", "MiB sent", "RSS MiB", "spooled MiB (peak)"],
                rows,
            )
        )


if __name__ == "__main__":
    main()
