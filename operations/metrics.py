"""The per-process instruments, in prometheus_client's multiprocess mode.

Each process (daphne, every Celery pool process, the Telegram bridge) writes its values to
files in PROMETHEUS_MULTIPROC_DIR (set by settings before this module is imported); a scrape
of /metrics on a host sums the files of every process on that host (`scrape_registry`).
Labels are bounded sets (statuses, kinds), never ids or free text."""

import logging
import os
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess
from prometheus_client.exposition import generate_latest

logger = logging.getLogger(__name__)

SECONDS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)

TURNS_FINISHED = Counter(
    "hermes_turns_finished", "Turns finished in processes of this host, by status.", ["status"]
)
TURN_LATENCY = Histogram(
    "hermes_turn_latency_seconds", "Time from a turn's start to its end.", buckets=SECONDS
)
TURN_FIRST_TOKEN = Histogram(
    "hermes_turn_first_token_seconds",
    "Time from a turn's start to the first text the model streamed.",
    buckets=SECONDS,
)
MODEL_ERRORS = Counter(
    "hermes_model_errors",
    "Model calls of turns that failed for good (after retries), by kind.",
    ["kind"],
)
TOOL_CALLS = Counter("hermes_tool_calls", "Tool calls the agent ran, by outcome.", ["outcome"])
TOOL_CALL_SECONDS = Histogram(
    "hermes_tool_call_seconds", "Time one tool call took.", buckets=(0.01, 0.05, *SECONDS)
)
WEBSOCKETS_OPEN = Gauge(
    "hermes_websocket_connections",
    "Chat WebSocket connections open now in processes of this host.",
    multiprocess_mode="livesum",
)
WEBSOCKETS_OPENED = Counter("hermes_websocket_connections_opened", "Chat WebSockets accepted.")
TELEGRAM_UPDATES = Counter(
    "hermes_telegram_updates",
    "Telegram updates processed (polling or webhook), by kind and whether a redelivery.",
    ["kind", "duplicate"],
)

_LIVE_FILE = re.compile(r"^gauge_live\w*_(\d+)\.db$")


def _forget_dead_processes(directory: Path) -> None:
    """Drop the live gauges of processes that are gone (a crashed, restarted daphne would
    otherwise keep reporting its open sockets); their counters stay, as counters must."""
    for path in directory.glob("gauge_live*.db"):
        match = _LIVE_FILE.match(path.name)
        if not match:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, str(directory))
        except PermissionError:
            pass  # alive, another user's


def scrape_registry(*extra_collectors) -> CollectorRegistry:
    """A registry that sums every process's files in PROMETHEUS_MULTIPROC_DIR, plus
    `extra_collectors` (the hub-wide figures)."""
    registry = CollectorRegistry()
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        _forget_dead_processes(Path(directory))
        multiprocess.MultiProcessCollector(registry, path=directory)
    for collector in extra_collectors:
        registry.register(collector)
    return registry


def render(*extra_collectors) -> bytes:
    """The text exposition format of this host's processes and `extra_collectors`."""
    return generate_latest(scrape_registry(*extra_collectors))
