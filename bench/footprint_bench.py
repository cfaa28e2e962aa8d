"""Memory of `make run`: each process's proportional set size (PSS, /proc/<pid>/smaps_rollup)
and the total, at idle, after N turns answered by the fake model, and after the first turn
of the demo model (when the `local` extra is installed).

It starts `make run` itself (`python -m hermes_site.runner`: the supervisor and every
process it starts, with the same settings) on a temporary HERMES_VAR_DIR, a free PORT and
VALKEY_PORT, and tests/fakes/openai_server.py as LLM_BASE_URL; posts the turns through the
HTTP API v1 with a token and waits for each reply. `--layout` picks the process layout
(HERMES_PROCESS_LAYOUT: embedded, the default, or split, the earlier one); several layouts
alternate, run after run, so both see the same machine.

    .venv/bin/python bench/footprint_bench.py --layout split,embedded --runs 3 --turns 100
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from hermes_site.embedded_valkey import free_port  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402

MIB = 1024 * 1024
SKIPPED_ENV = {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}


def pss_kib(pid: int) -> int:
    """The process's PSS in KiB (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0
    match = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return found


class Hub:
    """`make run` as a subprocess, its output collected."""

    def __init__(self, env: dict[str, str]):
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "hermes_site.runner"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        checked = 0
        while time.monotonic() < deadline:
            while checked < len(self.lines):
                match = re.search(pattern, self.lines[checked])
                checked += 1
                if match:
                    return match
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        tail = "\n".join(self.lines[-40:])
        raise SystemExit(f"no line matching {pattern!r} within {timeout} s:\n{tail}")

    def names(self) -> dict[int, str]:
        """pid → name of each supervised process, as last announced."""
        named = {}
        for line in self.lines:
            match = re.search(r"supervisor\s*\| started (\S+) \(pid (\d+)\)", line)
            if match:
                named = {p: n for p, n in named.items() if n != match.group(1)}
                named[int(match.group(2))] = match.group(1)
        return named

    def memory(self) -> dict[str, int]:
        """name → PSS in KiB of each process of the tree (children named after their parent:
        "worker/child 1")."""
        figures = {"supervisor": pss_kib(self.process.pid)}
        for pid, name in self.names().items():
            figures[name] = pss_kib(pid)
            stack = [(child, name) for child in children(pid)]
            count = 0
            while stack:
                child, parent = stack.pop()
                count += 1
                figures[f"{name}/child {count}"] = pss_kib(child)
                stack += [(c, parent) for c in children(child)]
        return figures

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def api(base: str, token: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def take_turn(base: str, token: str, chat: str, index: int, timeout: float = 300) -> str:
    posted = api(
        base,
        token,
        "/api/v1/messages",
        {"chat_id": chat, "user_id": "bench", "message_id": f"m-{index}", "text": f"hi {index}"},
    )
    turn_id = posted["turn"]["id"]
    deadline = time.monotonic() + timeout
    while True:
        turn = api(base, token, f"/api/v1/turns/{turn_id}")["turn"]
        if turn["status"] not in ("queued", "running"):
            return turn["status"]
        if time.monotonic() > deadline:
            raise SystemExit(f"turn {turn_id} not answered within {timeout} s")
        time.sleep(0.05)


def settle(hub: Hub, seconds: float) -> dict[str, int]:
    """The memory once the processes had `seconds` to settle (beat's first ticks, imports
    that happen at the first task)."""
    time.sleep(seconds)
    return hub.memory()


def one_run(layout: str, turns: int, *, fake_url: str | None, settle_seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="hermes-footprint-") as var:
        port, valkey_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if k not in SKIPPED_ENV}
        env.update(
            HERMES_VAR_DIR=var,
            PORT=str(port),
            VALKEY_PORT=str(valkey_port),
            HERMES_PROCESS_LAYOUT=layout,
            LOG_LEVEL="WARNING",
            # This checkout's code in every process (a venv may hold another one, editable).
            PYTHONPATH=str(PROJECT_ROOT),
        )
        if fake_url:
            env.update(LLM_PROVIDER="openai", LLM_BASE_URL=fake_url, LLM_MODEL="fake-model")
        else:
            for name in ("LLM_PROVIDER", "LLM_BASE_URL", "LLM_MODEL"):
                env.pop(name, None)
        hub = Hub(env)
        try:
            login = hub.wait_for(r"admin login: (\S+) / (\S+)", 300)
            hub.wait_for(rf"Hermes Hub is up: http://127\.0\.0\.1:{port}/", 300)
            for name in hub.names().values():
                if name not in ("valkey", "web", "telegram"):
                    hub.wait_for(rf"{name}\s*\|.* ready\.", 300)
            token = subprocess.run(
                [sys.executable, "manage.py", "create_api_token", login.group(1)],
                cwd=PROJECT_ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            base = f"http://127.0.0.1:{port}"
            result = {"layout": layout, "idle": settle(hub, settle_seconds)}
            statuses = [take_turn(base, token, f"c{i % 10}", i) for i in range(turns)]
            result["turns"] = {"count": turns, "completed": statuses.count("completed")}
            result["after_turns"] = settle(hub, settle_seconds)
            return result
        finally:
            hub.stop()


def local_model_installed() -> bool:
    """The demo model's runtime and weights are there, as the provider itself decides."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    django.setup()
    from chats.agent.llm.local import LocalProvider

    return LocalProvider.available()


def total_mib(figures: dict[str, int]) -> float:
    return sum(figures.values()) / 1024


def report(results: list[dict]) -> str:
    lines = []
    for layout in dict.fromkeys(r["layout"] for r in results):
        runs = [r for r in results if r["layout"] == layout]
        for phase in ("idle", "after_turns", "after_demo_turn"):
            phased = [r[phase] for r in runs if phase in r]
            if not phased:
                continue
            names = list(dict.fromkeys(n for figures in phased for n in figures))
            per = {n: statistics.median(f.get(n, 0) / 1024 for f in phased) for n in names}
            total = statistics.median(total_mib(f) for f in phased)
            largest = max(per.values())
            parts = ", ".join(f"{n} {v:.0f}" for n, v in per.items())
            lines.append(
                f"| {layout} | {phase} | {len(phased)} | {total:.0f} | {largest:.0f} | {parts} |"
            )
    header = (
        "| layout | when | runs | total PSS MiB (median) | largest process MiB | "
        "per process MiB (median) |\n|---|---|---|---|---|---|"
    )
    return header + "\n" + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--layout",
        default=os.environ.get("HERMES_PROCESS_LAYOUT", "split,embedded"),
        help="comma-separated layouts to alternate (embedded, split)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before measuring")
    parser.add_argument("--json", help="append each run's figures to this file")
    args = parser.parse_args()
    layouts = [name.strip() for name in args.layout.split(",") if name.strip()]
    results = []
    with FakeOpenAI(default="a short answer from the fake model") as fake:
        for run in range(args.runs):
            for layout in layouts:
                result = one_run(
                    layout, args.turns, fake_url=fake.base_url, settle_seconds=args.settle
                )
                result["run"] = run
                print(
                    f"run {run} {layout}: idle {total_mib(result['idle']):.0f} MiB, after "
                    f"{args.turns} turns {total_mib(result['after_turns']):.0f} MiB "
                    f"({result['turns']['completed']} completed)",
                    flush=True,
                )
                for phase in ("idle", "after_turns"):
                    shown = ", ".join(f"{n} {v / 1024:.0f}" for n, v in result[phase].items())
                    print(f"  {phase}: {shown}", flush=True)
                results.append(result)
                if args.json:
                    with open(args.json, "a") as file:
                        file.write(json.dumps(result) + "\n")
    if local_model_installed():
        for layout in layouts:
            demo = one_run(layout, 1, fake_url=None, settle_seconds=args.settle)
            results.append({"layout": layout, "after_demo_turn": demo["after_turns"]})
    else:
        print("demo model: the `local` extra is not installed, not measured", flush=True)
    print(report(results))


if __name__ == "__main__":
    main()
