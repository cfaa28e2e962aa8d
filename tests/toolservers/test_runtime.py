"""The MCP runtime against real processes: the child's environment, faults, restarts."""

import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from tests.toolservers.conftest import PROBE, PYTHON, _free_port
from toolservers.runtime import ServerSpec, ToolServerError, runtime


def _probe(slug="probe", **extra) -> ServerSpec:
    return ServerSpec(slug=slug, transport="stdio", command=PYTHON, args=(PROBE,), **extra)


def _text(result) -> str:
    return "".join(item.text for item in result.content if item.type == "text")


def test_the_child_gets_its_configured_env_and_none_of_the_hubs_secrets(monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-live-hub-model-key")
    monkeypatch.setenv("DATABASE_URL", "postgres://hub:pw@db/hub")
    monkeypatch.setenv("PROBE_TOKEN_SOURCE", "token-from-the-hub-env")
    spec = _probe(
        slug="probe-env",
        env=(("GREETING", "hello"), ("TOKEN", "token-from-the-hub-env")),
    )
    result = runtime.call_tool(spec, "environment", {})
    child = json.loads(_text(result))
    assert child.get("GREETING") == "hello" and child.get("TOKEN") == "token-from-the-hub-env"
    assert child.get("PATH") == os.environ["PATH"]
    for secret in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "LLM_API_KEY"):
        assert secret not in child, secret
    assert "sk-live-hub-model-key" not in str(child) and "test-only" not in str(child.values())


def test_a_missing_executable_is_a_clear_error():
    spec = ServerSpec(slug="nowhere", transport="stdio", command="/nonexistent/mcp-server")
    with pytest.raises(ToolServerError, match="could not be started.*No such file"):
        runtime.list_tools(spec)


def test_a_server_that_keeps_failing_is_restarted_with_backoff():
    spec = ServerSpec(slug="flaky", transport="stdio", command="/nonexistent/flaky-server")
    for _ in range(2):  # the first retry is at once
        with pytest.raises(ToolServerError, match="could not be started"):
            runtime.call_tool(spec, "anything", {})
    with pytest.raises(ToolServerError, match="failed 2 times in a row.*No such file") as caught:
        runtime.call_tool(spec, "anything", {})
    # Never "not restarted for another 0 s": whole seconds rounded up, or "in a moment".
    assert re.search(r"started again (in a moment|in [1-9]\d* s) \(last error", str(caught.value))


def test_a_stdio_server_that_cannot_start_says_why_from_its_error_output():
    script = (
        "import sys; sys.stderr.write('starting\\n' + 'x' * 5000 + '\\nError: None of the "
        "specified directories are accessible\\n'); sys.exit(1)"
    )
    spec = ServerSpec(slug="says-why", transport="stdio", command=PYTHON, args=("-c", script))
    with pytest.raises(ToolServerError) as caught:
        runtime.list_tools(spec)
    message = str(caught.value)
    assert "could not be started" in message
    assert "None of the specified directories are accessible" in message
    assert "starting" not in message  # a bounded tail, not the whole output


def test_a_hang_past_the_timeout_is_cancelled_and_the_server_restarted():
    spec = _probe(slug="probe-hang", call_timeout=0.5)
    assert _text(runtime.call_tool(spec, "echo", {"text": "a"})) == "echo: a"
    started = time.monotonic()
    with pytest.raises(ToolServerError, match="did not answer within 0.5 s.*restarted"):
        runtime.call_tool(spec, "hang", {"seconds": 60})
    assert time.monotonic() - started < 10
    assert _text(runtime.call_tool(spec, "echo", {"text": "b"})) == "echo: b"


def test_a_server_killed_mid_call_is_an_error_and_the_next_call_restarts_it():
    spec = _probe(slug="probe-crash", call_timeout=10)
    with pytest.raises(ToolServerError, match="crash|closed|failed"):
        runtime.call_tool(spec, "crash", {})
    assert _text(runtime.call_tool(spec, "echo", {"text": "again"})) == "echo: again"


def test_malformed_output_does_not_break_the_session():
    spec = _probe(slug="probe-malformed", call_timeout=5)
    # The SDK drops a line that is not JSON-RPC and a reply of the wrong shape; the call
    # gets its real answer and the session stays usable.
    assert _text(runtime.call_tool(spec, "malformed", {})) == "the proper answer, too late"
    assert _text(runtime.call_tool(spec, "echo", {"text": "fine"})) == "echo: fine"


def test_an_http_server_that_is_down_is_a_clear_error():
    spec = ServerSpec(slug="down", transport="http", url="http://127.0.0.1:9/mcp", call_timeout=5)
    with pytest.raises(ToolServerError, match="could not be started or reached"):
        runtime.list_tools(spec)


def test_streamable_http_lists_and_calls(http_probe):
    spec = ServerSpec(slug="http-probe", transport="http", url=http_probe)
    names = {tool.name for tool in runtime.list_tools(spec)}
    assert {"echo", "hang", "environment"} <= names
    assert _text(runtime.call_tool(spec, "echo", {"text": "over http"})) == "echo: over http"


def test_an_http_call_past_its_timeout_is_cancelled_and_the_next_call_works(http_probe):
    spec = ServerSpec(slug="http-slow", transport="http", url=http_probe, call_timeout=0.5)
    with pytest.raises(ToolServerError, match="did not answer within 0.5 s"):
        runtime.call_tool(spec, "hang", {"seconds": 30})
    assert _text(runtime.call_tool(spec, "echo", {"text": "back"})) == "echo: back"


class _ServerProcess:
    """The probe served over streamable HTTP by a process of its own, on a fixed port."""

    def __init__(self, port: int, *extra: str):
        self.port, self.extra, self.process = port, extra, None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [PYTHON, PROBE, "--http", str(self.port), *self.extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while True:  # until it accepts connections (or died)
            assert self.process.poll() is None, "the probe server did not start"
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@pytest.fixture
def restartable():
    servers = []

    def make(*extra: str) -> _ServerProcess:
        server = _ServerProcess(_free_port(), *extra)
        server.start()
        servers.append(server)
        return server

    yield make
    runtime.close()
    for server in servers:
        if server.process.poll() is None:
            server.kill()


@pytest.mark.parametrize("answer", ["404 (the spec)", "400 (some servers)"])
def test_an_http_server_restarted_gets_a_new_session_without_a_failed_call(restartable, answer):
    server = restartable(*(["--unknown-session-400"] if answer.startswith("400") else []))
    spec = ServerSpec(slug=f"restarted-{answer[:3]}", transport="http", url=server.url)
    assert _text(runtime.call_tool(spec, "echo", {"text": "before"})) == "echo: before"
    server.kill()
    server.start()  # the same port; the old session is unknown to the new process
    assert _text(runtime.call_tool(spec, "echo", {"text": "after"})) == "echo: after"
    assert _text(runtime.call_tool(spec, "echo", {"text": "and on"})) == "echo: and on"
    assert {tool.name for tool in runtime.list_tools(spec)} >= {"echo"}


def test_a_call_while_the_http_server_is_down_fails_once_and_the_next_one_reconnects(
    restartable,
):
    server = restartable()
    spec = ServerSpec(slug="down-then-up", transport="http", url=server.url, call_timeout=5)
    assert _text(runtime.call_tool(spec, "echo", {"text": "one"})) == "echo: one"
    server.kill()
    with pytest.raises(ToolServerError, match="down-then-up"):
        runtime.call_tool(spec, "echo", {"text": "lost"})
    server.start()
    assert _text(runtime.call_tool(spec, "echo", {"text": "two"})) == "echo: two"


@pytest.fixture
def sse_only_probe():
    """The probe over the older SSE transport only (GET /sse, POST /messages/)."""
    import uvicorn

    from tests.toolservers.probe_server import build

    port = _free_port()
    config = uvicorn.Config(build().sse_app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the SSE probe server did not start"
    yield f"http://127.0.0.1:{port}/sse"
    server.should_exit = True
    thread.join(5)


def test_an_sse_only_url_says_that_only_streamable_http_is_spoken(sse_only_probe):
    spec = ServerSpec(slug="sse-only", transport="http", url=sse_only_probe, call_timeout=5)
    with pytest.raises(ToolServerError, match="could not be started or reached") as caught:
        runtime.list_tools(spec)
    assert "streamable HTTP" in str(caught.value)
