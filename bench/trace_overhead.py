"""What the trace spans cost: off (the default, no SDK provider) and on (the SDK's provider,
its batching processor and an exporter that drops what it gets, so no network is timed).

    .venv/bin/python bench/trace_overhead.py [--runs 7] [--loops 5000]

Times the hub's own instrumentation code, in one process, against the same work without
it: the request middleware around a view that returns at once; a turn's spans (the turn,
two model calls streaming 60 events each, two tool calls) around a loop over the same
events. Off first, then the SDK is installed (once per process, as the API allows) and the
same is timed on. Median of `--runs` runs of `--loops` iterations each, in microseconds.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import machine_info, markdown_table, median, setup_django  # noqa: E402

DELTAS = 58  # + usage + finish: 60 events per model call


def per_loop_us(function, *, loops: int, runs: int) -> float:
    """Median over `runs` of the microseconds one call of `function` takes."""
    function()  # warm-up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(loops):
            function()
        samples.append((time.perf_counter() - started) * 1e6 / loops)
    return median(samples)


def workloads():
    """(name, with instrumentation, without) callables."""
    from django.core.exceptions import MiddlewareNotUsed
    from django.http import HttpResponse
    from django.test import RequestFactory

    from chats.agent import tracing
    from chats.agent.llm.base import Finish, ProviderInfo, TextDelta, Usage
    from operations.middleware import RequestTracingMiddleware

    response = HttpResponse("ok")
    match = type("Match", (), {"route": "api/v1/turns/<int:turn_id>"})()

    def view(request):
        request.resolver_match = match
        return response

    try:
        middleware = RequestTracingMiddleware(view)
    except MiddlewareNotUsed:  # traces off: Django leaves it out of the chain
        middleware = view
    request = RequestFactory().get("/api/v1/turns/7", headers={"Authorization": "Bearer x"})

    info = ProviderInfo(
        name="openai-compatible", model="m", context_tokens=8192, supports_tools=True
    )
    events = [TextDelta("word ") for _ in range(DELTAS)] + [Usage(900, 60), Finish("stop")]
    chat = type("Chat", (), {"pk": 3, "channel": "api"})()
    turn = type(
        "Turn",
        (),
        {
            "pk": 7,
            "status": "completed",
            "iterations": 2,
            "model": "m",
            "prompt_tokens": 1800,
            "completion_tokens": 120,
        },
    )()
    tool = type("Tool", (), {"server": ""})()

    def consume(stream) -> int:
        count = 0
        for _event in stream:
            count += 1
        return count

    def turn_plain():
        for _ in range(2):
            consume(iter(events))

    def turn_traced():
        with tracing.turn_span(turn=turn, chat=chat, resumed=False) as span:
            for _ in range(2):
                consume(tracing.model_stream(iter(events), info=info, purpose="turn"))
            for name in ("current_time", "session_search"):
                tool_span = tracing.tool_span(name=name, call_id="c1", tool=tool)
                tracing.tool_span_end(tool_span, outcome="ok", duration_ms=3)
            tracing.turn_outcome(span, turn=turn, lease_lost=False)

    return [
        ("HTTP request (middleware)", lambda: middleware(request), lambda: view(request)),
        ("turn: 2 model calls × 60 events, 2 tool calls", turn_traced, turn_plain),
    ]


def install_sdk() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--loops", type=int, default=5000)
    args = parser.parse_args()
    os.environ.pop("TRACES_ENABLED", None)
    # No query is made: the database is never opened.
    setup_django(f"sqlite:///{tempfile.gettempdir()}/hermes-trace-bench-unused.sqlite3")

    rows = []
    measured = {}
    for name, traced, plain in workloads():
        measured[name] = [
            per_loop_us(plain, loops=args.loops, runs=args.runs),
            per_loop_us(traced, loops=args.loops, runs=args.runs),
        ]
    install_sdk()
    for name, traced, _plain in workloads():
        measured[name].append(per_loop_us(traced, loops=args.loops, runs=args.runs))
    for name, (plain, off, on) in measured.items():
        rows.append((name, plain, off, off - plain, on, on - plain))

    info = machine_info()
    print(f"Trace overhead, median of {args.runs} runs × {args.loops} loops, microseconds")
    print(
        f"Machine: {info['CPU']}, {info['cores']} cores, Python {info['Python']}, "
        f"load average {info['load average']}\n"
    )
    headers = ["work", "without spans µs", "off µs", "off: added µs", "on µs", "on: added µs"]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
