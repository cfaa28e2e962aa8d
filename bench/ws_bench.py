"""WebSocket fan-out: many dashboard clients watching replies stream in, end to end.

    .venv/bin/python bench/ws_bench.py [--clients 200] [--chats 50] [--concurrency 8]
        [--tokens-per-second 50] [--reply-tokens 200]

Needs REDIS_URL (`make bench` provides a throw-away embedded Valkey). Builds a temporary
SQLite database with `--chats` web rooms and `--clients` people (each a member of one
room, rooms filled evenly), a Django session per person, then starts the real processes
as subprocesses: the fake OpenAI server streaming `--reply-tokens`-token replies at
`--tokens-per-second`, ONE daphne and ONE Celery worker (prefork, `--concurrency` child
processes, so with fewer processes than chats some turns wait in the queue). Every person
opens the chat's WebSocket (`ws/chats/<chat_key>/?after=0`, session cookie and Origin as a
browser sends them), then one user message per chat is ingested here, which enqueues a
turn per chat.

Every client records every event. Checked per client: the `seq` numbers run 1, 2, 3, …
without a gap or a repeat up to the chat's `turn.finished`, and the `turn.delta` texts
joined equal the reply stored in the database. Delivery delay of a delta = the time the
client read its frame − the event's `ts` (publication time; same machine, same clock; `ts`
has millisecond resolution). daphne's resident memory (VmRSS) is sampled every 0.5 s.
Targets: nothing lost or out of order, p95 delivery delay <= 200 ms.

The WebSocket client is a minimal asyncio one written here (RFC 6455 text frames, ping,
close), so the benchmark needs nothing beyond the project's dependencies.
"""

import argparse
import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import (  # noqa: E402
    machine_info,
    markdown_table,
    migrate,
    percentile,
    setup_django,
    temporary_database,
)

BIN = Path(sys.executable).parent
END_TYPES = {"turn.finished", "turn.failed", "turn.interrupted"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- processes --------------------------------------------------------------------------


class Processes:
    """Subprocesses in their own sessions; all killed (process group) on `stop()`."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.running: dict[str, subprocess.Popen] = {}

    def spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by Popen
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.running[name] = process
        return process

    def check_alive(self) -> None:
        for name, process in self.running.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with status {process.returncode}; "
                    f"see {self.log_dir / (name + '.log')}"
                )

    def wait_for_port(self, name: str, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not listen on port {port} within {timeout:.0f} s")

    def wait_for_log(self, name: str, text: str, timeout: float) -> None:
        path = self.log_dir / f"{name}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if path.exists() and text in path.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not log {text!r} within {timeout:.0f} s; see {path}")

    def stop(self) -> None:
        for process in self.running.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.running.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)


class RssSampler(threading.Thread):
    """Peak VmRSS (kB) of one process, sampled every `interval` seconds."""

    def __init__(self, pid: int, interval: float = 0.5):
        super().__init__(daemon=True)
        self.path = Path(f"/proc/{pid}/status")
        self.interval = interval
        self.peak_kb = 0
        self.first_kb = 0
        self.stopped = threading.Event()

    def sample(self) -> None:
        with contextlib.suppress(OSError):
            for line in self.path.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    kb = int(line.split()[1])
                    self.first_kb = self.first_kb or kb
                    self.peak_kb = max(self.peak_kb, kb)
                    return

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()


# --- a minimal WebSocket client ---------------------------------------------------------


class WebSocketClosed(Exception):
    pass


class Client:
    """One browser tab: a WebSocket on one chat that records (receive time, event)."""

    def __init__(self, index: int, chat_key: str, session_key: str, after: int = 0):
        self.index = index
        self.chat_key = chat_key
        self.session_key = session_key
        self.after = after
        self.events: list[tuple[float, dict]] = []
        self.error: str | None = None
        self.done = asyncio.Event()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self, port: int, timeout: float) -> None:
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout
        )
        key = base64.b64encode(os.urandom(16)).decode()
        path = f"/ws/chats/{quote(self.chat_key, safe='')}/?after={self.after}"
        request = (
            f"GET {path} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            "Upgrade: websocket\r\n"
            "Connection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n"
            f"Origin: http://127.0.0.1:{port}\r\n"
            f"Cookie: sessionid={self.session_key}\r\n"
            "\r\n"
        )
        self.writer.write(request.encode())
        await self.writer.drain()
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), timeout)
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise RuntimeError(f"handshake refused: {status.decode(errors='replace')}")

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 65536:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
        self.writer.write(header + mask + masked)

    async def _read_frame(self) -> tuple[int, bool, bytes]:
        first, second = await self.reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
        mask = await self.reader.readexactly(4) if second & 0x80 else None
        payload = await self.reader.readexactly(length)
        if mask:
            payload = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
        return first & 0x0F, bool(first & 0x80), payload

    async def receive_until_end(self) -> None:
        """Read events until this chat's turn ends (or the socket closes)."""
        buffer, message_opcode = b"", 0
        try:
            while True:
                opcode, fin, payload = await self._read_frame()
                received = time.time()
                if opcode == 0x8:
                    code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                    raise WebSocketClosed(f"server closed the socket (code {code})")
                if opcode == 0x9:
                    self._send_frame(0xA, payload)
                    continue
                if opcode == 0xA:
                    continue
                if opcode in (0x1, 0x2):
                    buffer, message_opcode = payload, opcode
                else:  # continuation
                    buffer += payload
                if not fin:
                    continue
                if message_opcode != 0x1:
                    continue
                event = json.loads(buffer.decode())
                self.events.append((received, event))
                if event.get("type") in END_TYPES:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, WebSocketClosed) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done.set()

    async def close(self) -> None:
        if self.writer is None:
            return
        with contextlib.suppress(Exception):
            self._send_frame(0x8, struct.pack("!H", 1000))
            await asyncio.wait_for(self.writer.drain(), 2)
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 2)


class ClientSwarm(threading.Thread):
    """All clients on one asyncio loop in a background thread (the main thread uses Django)."""

    def __init__(self, clients: list[Client], port: int):
        super().__init__(daemon=True)
        self.clients = clients
        self.port = port
        self.loop = asyncio.new_event_loop()
        self.connected = threading.Event()
        self.connect_error: BaseException | None = None
        self.tasks: list[asyncio.Task] = []

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _connect_all(self) -> None:
        limit = asyncio.Semaphore(50)  # handshakes in flight at once

        async def one(client: Client) -> None:
            async with limit:
                await client.connect(self.port, timeout=30)

        await asyncio.gather(*(one(client) for client in self.clients))
        # Let every consumer finish `connect()` (group_add, replay) before turns start.
        await asyncio.sleep(1.0)
        self.tasks = [asyncio.create_task(c.receive_until_end()) for c in self.clients]

    def connect_all(self, timeout: float) -> None:
        future = asyncio.run_coroutine_threadsafe(self._connect_all(), self.loop)
        future.result(timeout)

    def wait_all_done(self, timeout: float) -> bool:
        async def wait() -> bool:
            try:
                await asyncio.wait_for(
                    asyncio.gather(*(c.done.wait() for c in self.clients)), timeout
                )
                return True
            except TimeoutError:
                return False

        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result(timeout + 10)

    def shutdown(self) -> None:
        async def close_all() -> None:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)

        if self.loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.join(10)


# --- the benchmark ----------------------------------------------------------------------


def build_people_and_rooms(chat_count: int, client_count: int):
    """`chat_count` web rooms, `client_count` people spread evenly, one session each.
    Returns [(chat, [(person, session_key), ...]), ...]."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from chats.models import Channel, ChatKind, ChatMember
    from chats.services import chat_get_or_create

    User = get_user_model()
    template = User(username="bench-hash-template")
    template.set_password("bench-password")  # hashed once; every person shares the hash
    User.objects.bulk_create(
        [
            User(username=f"bench-{index:04d}", password=template.password)
            for index in range(client_count)
        ]
    )
    people = list(User.objects.filter(username__startswith="bench-0").order_by("username"))
    if len(people) != client_count:
        people = list(User.objects.filter(username__startswith="bench-").order_by("username"))
    chats = [
        chat_get_or_create(
            channel=Channel.WEB,
            chat_id=f"bench-room-{index:03d}",
            kind=ChatKind.ROOM,
            title=f"Bench room {index}",
        )[0]
        for index in range(chat_count)
    ]
    members = {chat.pk: [] for chat in chats}
    memberships = []
    # The backend that loads people (the first one, django-axes, only counts failed logins).
    backend = next(b for b in settings.AUTHENTICATION_BACKENDS if "ModelBackend" in b)
    for index, person in enumerate(people):
        chat = chats[index % chat_count]
        role = ChatMember.Role.OWNER if not members[chat.pk] else ChatMember.Role.MEMBER
        memberships.append(ChatMember(chat=chat, person=person, role=role))
        session = SessionStore()
        session["_auth_user_id"] = str(person.pk)
        session["_auth_user_backend"] = backend
        session["_auth_user_hash"] = person.get_session_auth_hash()
        session.create()
        members[chat.pk].append((person, session.session_key))
    ChatMember.objects.bulk_create(memberships)
    return [(chat, members[chat.pk]) for chat in chats]


def trigger_turns(rooms) -> dict[int, float]:
    """One user message per chat, ingested as the web composer does; enqueues the turns."""
    from chats.agent.turns import message_received
    from chats.services import message_ingest

    started = {}
    for chat, members in rooms:
        person = members[0][0] if members else None
        result = message_ingest(
            channel=chat.channel,
            chat_id=chat.external_id,
            user_id=person.get_username() if person else "bench",
            user_name=person.get_username() if person else "bench",
            person=person,
            text="Please write a long answer so the benchmark can watch it stream.",
            message_id=str(uuid.uuid4()),
        )
        started[chat.pk] = time.time()
        message_received(result)
    return started


def parse_ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def check_client(client: Client, reply_text: str | None) -> tuple[list[float], int, str | None]:
    """(delivery delays of its deltas in ms, deltas, problem or None)."""
    if client.error and not any(e.get("type") in END_TYPES for _, e in client.events):
        return [], 0, f"socket: {client.error}"
    seqs = [event.get("seq") for _, event in client.events]
    expected = list(range(1, len(seqs) + 1)) if seqs and seqs[0] == 1 else None
    problem = None
    if not seqs:
        problem = "no events"
    elif expected is None or seqs != expected:
        problem = f"seq not 1..n without gaps: {seqs[:8]}..."
    elif client.events[-1][1].get("type") != "turn.finished":
        problem = f"ended with {client.events[-1][1].get('type')}, not turn.finished"
    deltas = [
        (received, event) for received, event in client.events if event.get("type") == "turn.delta"
    ]
    text = "".join(event.get("text", "") for _, event in deltas)
    if problem is None and text != reply_text:
        problem = f"delta texts ({len(text)} chars) != stored reply ({len(reply_text or '')} chars)"
    delays = [(received - parse_ts(event["ts"])) * 1000 for received, event in deltas]
    return delays, len(deltas), problem


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8, help="Celery prefork processes")
    parser.add_argument("--tokens-per-second", type=float, default=50)
    parser.add_argument("--reply-tokens", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=None, help="seconds for all turns")
    args = parser.parse_args()
    if not os.environ.get("REDIS_URL"):
        raise SystemExit(
            "REDIS_URL is required (make bench runs an embedded Valkey; or "
            ".venv/bin/python -m hermes_site.embedded_valkey --exec -- "
            ".venv/bin/python bench/ws_bench.py)"
        )
    if args.clients < args.chats:
        raise SystemExit("--clients must be >= --chats (every chat needs a watcher)")
    os.environ["REDIS_KEY_PREFIX"] = f"hermes-wsbench-{os.getpid()}"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
    reply_seconds = args.reply_tokens / args.tokens_per_second
    waves = -(-args.chats // args.concurrency)
    timeout = args.timeout or 60 + waves * reply_seconds * 3

    wall_started = time.monotonic()
    with temporary_database(None, label="ws") as url:
        setup_django(url)
        migrate()
        from chats.models import Turn

        rooms = build_people_and_rooms(args.chats, args.clients)
        web_port, model_port = free_port(), free_port()
        log_dir = Path(url.removeprefix("sqlite:///")).parent
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
            "LLM_MODEL": "fake-model",
            "LLM_API_KEY": "fake",
            "LLM_TIMEOUT_SECONDS": str(int(reply_seconds * 3 + 30)),
        }
        processes = Processes(env, log_dir)
        swarm: ClientSwarm | None = None
        sampler: RssSampler | None = None
        try:
            processes.spawn(
                "model",
                [
                    sys.executable,
                    "-m",
                    "tests.fakes.openai_server",
                    "--port",
                    str(model_port),
                    "--tokens-per-second",
                    f"{args.tokens_per_second:g}",
                    "--reply-tokens",
                    str(args.reply_tokens),
                ],
            )
            daphne = processes.spawn(
                "daphne",
                [
                    str(BIN / "daphne"),
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(web_port),
                    "hermes_site.asgi:application",
                ],
            )
            processes.spawn(
                "worker",
                [
                    str(BIN / "celery"),
                    "-A",
                    "hermes_site",
                    "worker",
                    "--pool",
                    "prefork",
                    "--concurrency",
                    str(args.concurrency),
                    "--loglevel",
                    "INFO",
                    "-Q",
                    os.environ["REDIS_KEY_PREFIX"],
                    "-n",
                    f"wsbench-{os.getpid()}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                ],
            )
            processes.wait_for_port("model", model_port, 30)
            processes.wait_for_port("daphne", web_port, 30)
            processes.wait_for_log("worker", "ready", 60)
            sampler = RssSampler(daphne.pid)
            sampler.sample()
            sampler.start()

            watchers = [(chat, key) for chat, members in rooms for _, key in members]
            clients = [
                Client(index, chat.chat_key, key) for index, (chat, key) in enumerate(watchers)
            ]
            chat_of_client = [chat for chat, members in rooms for _ in members]
            swarm = ClientSwarm(clients, web_port)
            swarm.start()
            connect_started = time.monotonic()
            swarm.connect_all(timeout=120)
            connect_seconds = time.monotonic() - connect_started
            processes.check_alive()

            stream_started = time.monotonic()
            trigger_turns(rooms)
            finished = swarm.wait_all_done(timeout)
            stream_seconds = time.monotonic() - stream_started
            processes.check_alive()
            sampler.sample()

            turns = {
                turn.chat_id: turn
                for turn in Turn.objects.select_related("reply").filter(
                    chat_id__in=[chat.pk for chat, _ in rooms]
                )
            }
        finally:
            if swarm is not None:
                swarm.shutdown()
            if sampler is not None:
                sampler.stopped.set()
            processes.stop()
            from common import close_django_connections

            close_django_connections()

        statuses: dict[str, int] = {}
        for turn in turns.values():
            statuses[turn.status] = statuses.get(turn.status, 0) + 1
        delays: list[float] = []
        total_deltas = 0
        problems: list[str] = []
        for client, chat in zip(clients, chat_of_client, strict=True):
            turn = turns.get(chat.pk)
            reply_text = turn.reply.text if turn and turn.reply else None
            client_delays, count, problem = check_client(client, reply_text)
            delays += client_delays
            total_deltas += count
            if problem:
                problems.append(f"client {client.index} on {chat.chat_key}: {problem}")

    wall_seconds = time.monotonic() - wall_started
    info = machine_info()
    print(
        f"WebSocket fan-out: {args.clients} clients on {args.chats} web rooms, one daphne, "
        f"one Celery worker (prefork, {args.concurrency} processes), fake model at "
        f"{args.tokens_per_second:g} tokens/s x {args.reply_tokens} tokens, SQLite, embedded Redis"
    )
    print(
        f"Machine: {info['CPU']}, {info['cores']} cores, {info['OS']}, Python {info['Python']}, "
        f"load {info['load average']}\n"
    )
    rows = [
        ("clients / chats", f"{args.clients} / {args.chats}"),
        ("all turns ended in time", "yes" if finished else f"no (timeout {timeout:.0f} s)"),
        ("turn statuses", ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))),
        ("turn.delta events delivered (all clients)", total_deltas),
        ("clients with lost / out-of-order / wrong text (target 0)", len(problems)),
        ("delivery delay p50 ms", percentile(delays, 50) if delays else "-"),
        ("delivery delay p95 ms (target <= 200)", percentile(delays, 95) if delays else "-"),
        ("delivery delay max ms", max(delays) if delays else "-"),
        (
            "daphne RSS at start / peak MiB",
            f"{sampler.first_kb / 1024:.0f} / {sampler.peak_kb / 1024:.0f}" if sampler else "-",
        ),
        (f"time to open {args.clients} sockets s", connect_seconds),
        ("first message to last turn.finished s", stream_seconds),
        ("wall time s (set-up included)", wall_seconds),
    ]
    print(markdown_table(["measure", "value"], rows))
    if problems:
        print(f"\n{len(problems)} client(s) with problems; first ones:")
        for line in problems[:10]:
            print(f"- {line}")
    return 0 if finished and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
