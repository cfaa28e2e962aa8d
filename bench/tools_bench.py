"""Benchmark: tool servers (MCP): the hub's own overhead per call, cold start, prompt tokens.

    .venv/bin/python bench/tools_bench.py [--runs 200] [--cold 5]
                                          [--database-url postgres://postgres@127.0.0.1/x]

Starts the test probe server (`tests/toolservers/probe_server.py`, built with the SDK's
`MCPServer`) over stdio and times, on a warm session:

- **raw**: the SDK alone (`ClientSession.call_tool` of `echo` on its own asyncio loop): the
  server's own time plus the pipe;
- **hub**: the same call as the engine makes it (`execute_tool_call` on the tool the chat's
  toolset gives the turn: schema validation, policy, the runtime's loop thread, rendering,
  the token cut, the result scan and the `ToolCall` audit row).

The hub's overhead is hub p50 − raw p50 (target ≤ 5 ms). Cold start: spawn, handshake and
`tools/list` of a fresh server. Prompt tokens: the tool definitions of 5 servers × 20 tools
as the model receives them. Prints Markdown tables and the machine.
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

PROBE = str(Path(__file__).resolve().parent.parent / "tests" / "toolservers" / "probe_server.py")
TARGET_OVERHEAD_MS = 5.0


async def _raw_timings(runs: int) -> list[float]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[PROBE])
    timings = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for i in range(runs + 5):
            started = time.perf_counter()
            await session.call_tool("echo", {"text": "ping"})
            if i >= 5:
                timings.append((time.perf_counter() - started) * 1000)
    return timings


def _hub_timings(runs: int) -> tuple[list[float], int]:
    from chats.agent.registry import TurnContext
    from chats.agent.tools import execute_tool_call
    from chats.services import chat_get_or_create
    from toolservers.provider import tool_server_tools
    from toolservers.services import VIA_COMMAND, server_add, toolset_set

    chat, _ = chat_get_or_create(channel="web", chat_id="bench-room")
    server = server_add(
        by=None,
        via=VIA_COMMAND,
        slug="probe",
        transport="stdio",
        command=sys.executable,
        args=[PROBE],
    )
    toolset_set(by=None, via=VIA_COMMAND, chat=chat, server=server, policy="allow")
    context = TurnContext(chat=chat, trigger=None)
    tools = {tool.name: tool for tool in tool_server_tools.tools_for_turn(context)}
    arguments = json.dumps({"text": "ping"})
    timings = common.timings_ms(
        lambda: execute_tool_call(tools, "probe__echo", arguments, context), runs=runs, warmup=5
    )
    return timings, len(tools)


def _cold_timings(runs: int) -> list[float]:
    from toolservers.runtime import ServerSpec, runtime

    timings = []
    for i in range(runs):
        spec = ServerSpec(
            slug=f"cold-{i}", transport="stdio", command=sys.executable, args=(PROBE,)
        )
        timings.append(common.time_ms(lambda spec=spec: runtime.list_tools(spec)))
        runtime.close(spec.slug)
    return timings


def _prompt_tokens() -> tuple[int, int]:
    from chats.agent.counting import tools_tokens
    from chats.agent.registry import TurnContext
    from chats.services import chat_get_or_create
    from toolservers.models import ToolServer
    from toolservers.provider import tool_server_tools
    from toolservers.services import VIA_COMMAND, server_tools_record, toolset_set

    chat, _ = chat_get_or_create(channel="web", chat_id="bench-tokens")
    for s in range(5):
        server = ToolServer.objects.create(slug=f"svc{s}", transport="http", url="http://x/mcp")
        announced = [
            {
                "name": f"action_{t}",
                "description": f"Look up or change record kind {t} of service {s}: give an id, "
                "optional fields to return, and a limit for lists.",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "The record's id."},
                        "fields": {"type": "array", "items": {"type": "string"}},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    },
                    "required": ["id"],
                },
                "annotations": {"readOnlyHint": True},
            }
            for t in range(20)
        ]
        server_tools_record(server=server, announced=announced)
        toolset_set(by=None, via=VIA_COMMAND, chat=chat, server=server)
    tool_server_tools._listed.update({s.pk: float("inf") for s in ToolServer.objects.all()})
    tools = tool_server_tools.tools_for_turn(TurnContext(chat=chat, trigger=None))
    return len(tools), tools_tokens([tool.spec() for tool in tools])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cold", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    options = parser.parse_args()
    with common.temporary_database(options.database_url, label="tools") as url:
        common.setup_django(url)
        common.migrate()
        raw = asyncio.run(_raw_timings(options.runs))
        hub, _ = _hub_timings(options.runs)
        cold = _cold_timings(options.cold)
        count, tokens = _prompt_tokens()
        database = common.database_description()
        from toolservers.runtime import runtime

        runtime.close()
        common.close_django_connections()
    overhead = common.percentile(hub, 50) - common.percentile(raw, 50)
    print(f"## Tool servers (`bench/tools_bench.py`), {database}\n")
    print(
        common.markdown_table(
            ["call on a warm stdio session", "runs", "p50 ms", "p95 ms"],
            [
                [
                    "SDK alone (server + pipe)",
                    len(raw),
                    f"{common.percentile(raw, 50):.2f}",
                    f"{common.percentile(raw, 95):.2f}",
                ],
                [
                    "through the hub (engine path)",
                    len(hub),
                    f"{common.percentile(hub, 50):.2f}",
                    f"{common.percentile(hub, 95):.2f}",
                ],
            ],
        )
    )
    verdict = "met" if overhead <= TARGET_OVERHEAD_MS else "NOT met"
    print(f"\nHub overhead per call (p50): **{overhead:.2f} ms** (target ≤ 5 ms: {verdict})\n")
    print(
        common.markdown_table(
            ["measure", "value"],
            [
                [
                    f"cold start (spawn + handshake + tools/list), median of {len(cold)}",
                    f"{common.median(cold):.0f} ms",
                ],
                [f"prompt tokens of {count} tool definitions (5 servers × 20 tools)", tokens],
            ],
        )
    )
    print("\n" + ", ".join(f"{k}: {v}" for k, v in common.machine_info().items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
