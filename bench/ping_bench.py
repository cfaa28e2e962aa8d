"""WebSocket ping load: sockets flooding `ping` while a browser-like client loads a page.

    .venv/bin/python bench/ping_bench.py [--flooders 10] [--seconds 8] [--runs 3]
        [--buffer 2000]

Needs REDIS_URL (`make bench` provides a throw-away embedded Valkey). Builds a temporary
SQLite database with one person, one web room and its session, fills the room's replay
buffer with `--buffer` events (turn deltas of a streamed reply), then, per run, serves the
same database and Redis with one daphne per configuration, one after the other:

- before: the consumer as it was (bench/ping_legacy.py): each ping re-reads and decodes the
  whole replay buffer, no frame limit;
- after, frame limit off: today's consumer with WS_FRAME_BURST/WS_FRAMES_PER_SECOND raised
  out of reach, so only the ping path differs from "before";
- after, defaults: today's consumer as shipped (30-frame burst, 2 frames/s); a flooder
  closed with 4429 reconnects at once and goes on (the worst it can do).

For `--seconds`, `--flooders` sockets (opened with `after` = the newest seq, so nothing is
replayed at connect) each send a ping, wait for the answer, and repeat, while one client
requests the login page over HTTP in a loop and records each latency. Measured per
configuration: pongs per second, daphne CPU (utime + stime from /proc) per ping, and the
page latency median / p95 next to the same client's latency on the idle server. Each figure
is the median over `--runs` runs; all configurations run in every run, on one machine.
"""

import argparse
import asyncio
import http.client
import os
import struct
import sys
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
    migrate,
    percentile,
    setup_django,
    temporary_database,
)
from ws_bench import BIN, Client, Processes, free_port  # noqa: E402

PING = b'{"type": "ping"}'
CONFIGS = [
    ("before: whole buffer decoded per ping, no frame limit", "bench.ping_legacy", {}),
    (
        "after: tail by seq, frame limit off",
        "hermes_site.asgi",
        {"WS_FRAME_BURST": "100000000", "WS_FRAMES_PER_SECOND": "100000000"},
    ),
    ("after: defaults (frame limit on, flooders reconnect)", "hermes_site.asgi", {}),
]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build_room(buffer: int) -> tuple[str, str, int]:
    """A web room with one member, their session key, and `buffer` events in its buffer."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from chats.agent import events
    from chats.models import Channel, ChatKind, ChatMember
    from chats.services import chat_get_or_create

    person = get_user_model().objects.create_user("bench-pinger", password="bench-password")
    chat, _ = chat_get_or_create(channel=Channel.WEB, chat_id="ping-room", kind=ChatKind.ROOM)
    ChatMember.objects.create(chat=chat, person=person, role=ChatMember.Role.OWNER)
    session = SessionStore()
    session["_auth_user_id"] = str(person.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = person.get_session_auth_hash()
    session.create()
    text = "a streamed reply arrives in small pieces, about this long "
    for index in range(buffer):
        events.publish(chat.pk, "turn.delta", turn_id=1, text=f"{text}{index}")
    return chat.chat_key, session.session_key, events.last_seq(chat.pk)


class Flood:
    """`count` sockets sending pings back to back until `stop_at`; counts what happened."""

    def __init__(self, count: int, port: int, chat_key: str, session_key: str, after: int):
        self.count, self.port = count, port
        self.chat_key, self.session_key, self.after = chat_key, session_key, after
        self.pongs = self.connects = self.rate_closes = self.errors = 0

    async def one(self, index: int, stop_at: float) -> None:
        while time.monotonic() < stop_at:
            client = Client(index, self.chat_key, self.session_key, after=self.after)
            try:
                await client.connect(self.port, timeout=10)
            except Exception:  # noqa: BLE001 - refused or timed out: try again
                self.errors += 1
                await asyncio.sleep(0.05)
                continue
            self.connects += 1
            try:
                while time.monotonic() < stop_at:
                    client._send_frame(0x1, PING)
                    await client.writer.drain()
                    opcode, _, payload = await asyncio.wait_for(client._read_frame(), 10)
                    if opcode == 0x8:
                        code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 0
                        self.rate_closes += code == 4429
                        break
                    if opcode == 0x1 and b'"pong"' in payload:
                        self.pongs += 1
            except Exception:  # noqa: BLE001 - the server dropped us: reconnect
                self.errors += 1
            finally:
                client.writer.close()

    def run(self, seconds: float) -> None:
        stop_at = time.monotonic() + seconds

        async def all_of_them():
            await asyncio.gather(*(self.one(i, stop_at) for i in range(self.count)))

        asyncio.run(all_of_them())


def probe(port: int, seconds: float) -> list[float]:
    """Latencies (ms) of GET /accounts/login/, one request after another, for `seconds`."""
    latencies = []
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/accounts/login/")
        response = connection.getresponse()
        response.read()
        connection.close()
        if response.status == 200:
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def measure(module, extra_env, env, log_dir, args, room) -> dict:
    chat_key, session_key, newest = room
    port = free_port()
    processes = Processes({**env, **extra_env}, log_dir)
    try:
        daphne = processes.spawn(
            "daphne",
            [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), f"{module}:application"],
        )
        processes.wait_for_port("daphne", port, 30)
        probe(port, 1.0)  # warm up: imports, templates, connections
        idle = probe(port, args.seconds / 2)
        flood = Flood(args.flooders, port, chat_key, session_key, newest)
        flooding = threading.Thread(target=flood.run, args=(args.seconds,))
        cpu_before = cpu_seconds(daphne.pid)
        flooding.start()
        loaded = probe(port, args.seconds)
        flooding.join()
        cpu = cpu_seconds(daphne.pid) - cpu_before
        processes.check_alive()
    finally:
        processes.stop()
    return {
        "pongs/s": flood.pongs / args.seconds,
        "CPU ms/ping": cpu * 1000 / flood.pongs if flood.pongs else float("nan"),
        "CPU share": cpu / args.seconds,
        "idle p50": percentile(idle, 50),
        "loaded p50": percentile(loaded, 50),
        "loaded p95": percentile(loaded, 95),
        "closes 4429": flood.rate_closes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flooders", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--buffer", type=int, default=2000)
    args = parser.parse_args()
    if not os.environ.get("REDIS_URL"):
        raise SystemExit("REDIS_URL is required (make bench runs an embedded Valkey)")
    os.environ["REDIS_KEY_PREFIX"] = f"hermes-pingbench-{os.getpid()}"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")

    results: dict[str, list[dict]] = {label: [] for label, _, _ in CONFIGS}
    with temporary_database(None, label="ping") as url:
        setup_django(url)
        migrate()
        room = build_room(args.buffer)
        from common import close_django_connections

        close_django_connections()
        log_dir = Path(url.removeprefix("sqlite:///")).parent
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        for run in range(args.runs):
            for label, module, extra_env in CONFIGS:
                results[label].append(measure(module, extra_env, env, log_dir, args, room))
                print(f"run {run + 1}: {label}: {results[label][-1]}", file=sys.stderr)

    info = machine_info()
    print(
        f"WebSocket ping load: {args.flooders} sockets flooding pings for {args.seconds:g} s "
        f"against a {args.buffer}-event replay buffer, while one client loads the login page; "
        f"one daphne, SQLite, Redis at {os.environ['REDIS_URL']}; median of {args.runs} runs"
    )
    print(
        f"Machine: {info['CPU']}, {info['cores']} cores, {info['OS']}, Python {info['Python']}, "
        f"load {info['load average']}\n"
    )
    rows = []
    for label, runs in results.items():

        def mid(key, runs=runs):
            return median([r[key] for r in runs])

        rows.append(
            (
                label,
                f"{mid('pongs/s'):.0f}",
                f"{mid('CPU ms/ping'):.2f}",
                f"{mid('CPU share') * 100:.0f}%",
                f"{mid('idle p50'):.1f}",
                f"{mid('loaded p50'):.1f}",
                f"{mid('loaded p95'):.1f}",
                f"{mid('loaded p50') / mid('idle p50'):.1f}x",
                f"{mid('closes 4429'):.0f}",
            )
        )
    headers = [
        "server",
        "pongs/s",
        "daphne CPU ms per ping",
        "daphne CPU busy",
        "page p50 idle ms",
        "page p50 flooded ms",
        "page p95 flooded ms",
        "slow-down",
        "4429 closes",
    ]
    print(markdown_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
