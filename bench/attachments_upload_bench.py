"""Uploads of files through the real web server: the dashboard composer's upload and, for
comparison, the HTTP API's multipart upload.

    .venv/bin/python bench/attachments_upload_bench.py [--only upload] [--mib 20] [--runs 5]

`upload`: starts the hub's web server (hermes_site.webserver, as `make run`) and the same
server handing received bodies on in daphne's default 8 KiB pieces, on a fresh SQLite
database, the Redis of REDIS_URL (a key prefix of its own, removed afterwards) and a
temporary blob folder, then sends `--runs` messages each carrying one `--mib` MiB file of
random bytes (new bytes each time: no deduplication) to
`POST /attachments/chats/<key>/messages`
(a login session and the CSRF header, as the page sends it) and to
`POST /api/v1/uploads/messages` (a bearer token), and the same body with a refused token
(what receiving the body costs before any view runs), the servers taking turns, one upload
at a time on loopback. The turn each message requests is only queued (no worker runs here).
Reported per server and path: the median seconds from the first byte sent to the answer
(and MiB/s); per server its resident memory before the first upload, the largest sample
during the uploads (every 20 ms) and after the last one.
"""

import argparse
import contextlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import machine_info, markdown_table, median, setup_django, temporary_database  # noqa: E402
from ws_bench import Processes, free_port  # noqa: E402

PARTS = ("upload",)
# The hub's server as `make run` starts it, and the same with daphne's own 8 KiB pieces of a
# received body (hermes_site.webserver.REQUEST_BUFFER_BYTES), for comparison.
SERVERS = {
    "hub (1 MiB pieces)": [sys.executable, "-m", "hermes_site.webserver"],
    "8 KiB pieces (daphne's default)": [
        sys.executable,
        "-c",
        "import sys; import hermes_site.webserver as w; w.REQUEST_BUFFER_BYTES = 8192; "
        "sys.argv[0] = 'webserver'; w.HubCommandLine.entrypoint()",
    ],
}
CSRF = "b" * 32  # a well-formed secret: the cookie and the header carry the same one


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def multipart(fields: dict[str, str], name: str, data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    lines = []
    for key, value in fields.items():
        lines.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'
        )
    head = (
        "".join(lines).encode()
        + (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
    )
    return head + data + f"\r\n--{boundary}--\r\n".encode(), boundary


def send(
    port: int, path: str, body: bytes, boundary: str, headers: dict, expect: int = 201
) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    started = time.perf_counter()
    connection.request(
        "POST",
        path,
        body,
        {
            **headers,
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(body)),
        },
    )
    response = connection.getresponse()
    answer = response.read()
    elapsed = time.perf_counter() - started
    connection.close()
    if response.status != expect:
        raise SystemExit(f"{path} answered {response.status}: {answer[:300]!r}")
    return elapsed


class RssWatch:
    """The largest resident memory of `pid` seen while running (sampled every 20 ms)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


def upload_part(args) -> None:
    prefix = f"bench-upload-{os.getpid()}"
    with (
        temporary_database(label="upload") as database_url,
        tempfile.TemporaryDirectory(prefix="hermes-upload-bench-") as work,
    ):
        os.environ.update(REDIS_KEY_PREFIX=prefix)
        setup_django(database_url)  # sets SECRET_KEY if missing: the server gets the same
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_KEY_PREFIX": prefix,
            "LLM_PROVIDER": "none",
            "LOG_LEVEL": "WARNING",
            "ATTACHMENTS_STORAGE_OPTIONS": json.dumps({"location": f"{work}/blobs"}),
            "TMPDIR": work,
            "WEB_POST_RATE_LIMIT_PER_MINUTE": "0",
            "API_RATE_LIMIT_PER_MINUTE": "0",
            "ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY": str(10 * 1024**3),
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
        )
        from django.contrib.auth import get_user_model
        from django.test import Client

        from chats.models import ChatMember
        from chats.services import api_token_create, chat_get_or_create, chat_member_ensure

        person = get_user_model().objects.create_user("bench", password="x")
        room, _ = chat_get_or_create(channel="web", chat_id="bench-room", title="Bench")
        chat_member_ensure(chat=room, person=person, role=ChatMember.Role.OWNER)
        _, token = api_token_create(person=person, name="bench")
        client = Client()
        client.force_login(person)
        session = client.cookies["sessionid"].value

        logs = Path(work) / "logs"
        logs.mkdir()
        group = Processes(env, logs)
        started: dict[str, tuple[int, int]] = {}
        try:
            for name, command in SERVERS.items():
                port = free_port()
                process = group.spawn(
                    name.split(" ")[0],
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
                started[name] = (process.pid, port)
            paths = {
                # The web server and Django's ASGI handler receive the whole body before any
                # view runs: a refused token shows what receiving the body costs by itself.
                "body only (API, bad token: 401)": (
                    "/api/v1/uploads/messages",
                    {"Authorization": "Bearer not-a-token"},
                    lambda index: {"chat_id": "x", "user_id": "u1", "text": "a file"},
                    401,
                ),
                "dashboard composer": (
                    f"/attachments/chats/{room.chat_key}/messages",
                    {"Cookie": f"sessionid={session}; csrftoken={CSRF}", "X-CSRFToken": CSRF},
                    lambda index: {"text": "a file", "client_id": str(uuid.uuid4())},
                    201,
                ),
                "API v1 upload": (
                    "/api/v1/uploads/messages",
                    {"Authorization": f"Bearer {token}"},
                    lambda index: {
                        "chat_id": "bench-api",
                        "user_id": "u1",
                        "message_id": f"m{index}-{uuid.uuid4().hex}",
                        "text": "a file",
                    },
                    201,
                ),
            }
            size = int(args.mib * 1024 * 1024)
            # Warm-up: imports and first queries, with a small file on each path.
            for _pid, port in started.values():
                for path, headers, fields, expect in paths.values():
                    body, boundary = multipart(fields(-1), "warm.bin", os.urandom(1024))
                    send(port, path, body, boundary, headers, expect)
            times: dict[tuple[str, str], list[float]] = {}
            memory: dict[str, list[int]] = {}
            watches = {name: RssWatch(pid) for name, (pid, _port) in started.items()}
            for name, (pid, _port) in started.items():
                memory[name] = [rss_kib(pid)]
                watches[name].__enter__()
            # The servers take turns, upload by upload, so load from elsewhere hits both.
            for index in range(args.runs):
                for path_name, (path, headers, fields, expect) in paths.items():
                    for name, (_pid, port) in started.items():
                        body, boundary = multipart(fields(index), "big.bin", os.urandom(size))
                        elapsed = send(port, path, body, boundary, headers, expect)
                        times.setdefault((name, path_name), []).append(elapsed)
            time.sleep(0.5)
            for name, (pid, _port) in started.items():
                watches[name].__exit__(None, None, None)
                memory[name] += [watches[name].peak, rss_kib(pid)]
        finally:
            group.stop()
            with contextlib.suppress(Exception):
                import redis

                client_redis = redis.Redis.from_url(os.environ.get("REDIS_URL", ""))
                keys = list(client_redis.scan_iter(f"{prefix}*", count=1000))
                if keys:
                    client_redis.delete(*keys)

    print(", ".join(f"{key}: {value}" for key, value in machine_info().items()))
    print(f"one {args.mib:g} MiB file per message, {args.runs} messages per path and server\n")
    rows = [
        [
            name,
            path_name,
            f"{median(values):.2f}",
            " / ".join(f"{t:.2f}" for t in values),
            f"{args.mib / median(values):.1f}",
        ]
        for (name, path_name), values in times.items()
    ]
    print(markdown_table(["server", "path", "s (median)", "s per upload", "MiB/s"], rows))
    print()
    rows = [
        [name, f"{before / 1024:.0f}", f"{peak / 1024:.0f}", f"{after / 1024:.0f}"]
        for name, (before, peak, after) in memory.items()
    ]
    print(markdown_table(["server", "RSS before MiB", "RSS peak MiB", "RSS after MiB"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=PARTS, action="append", help="run only these parts")
    parser.add_argument("--mib", type=float, default=20, help="size of each file in MiB")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    parts = args.only or list(PARTS)
    if "upload" in parts:
        upload_part(args)


if __name__ == "__main__":
    main()
