"""Fixtures for tool servers: the probe over stdio and over streamable HTTP on loopback,
real PyPI servers over stdio, and a clean slate of per-process listings for each test."""

import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from toolservers.models import Transport
from toolservers.provider import tool_server_tools
from toolservers.runtime import runtime
from toolservers.services import VIA_COMMAND, server_add, toolset_set

PROBE = str(Path(__file__).with_name("probe_server.py"))
PYTHON = sys.executable


@pytest.fixture(autouse=True)
def _fresh_listings():
    """Database rows (and their ids) do not outlive a test; what this process listed must not."""
    tool_server_tools.forget()
    runtime.forget_failures()
    yield
    tool_server_tools.forget()
    runtime.forget_failures()


@pytest.fixture(scope="module", autouse=True)
def _close_sessions():
    """Sessions are reused within a module (a spawn costs most of a second) and closed after."""
    yield
    runtime.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def http_probe():
    """The probe server over streamable HTTP on a loopback port; yields its URL."""
    import uvicorn

    from tests.toolservers.probe_server import build

    port = _free_port()
    app = build().streamable_http_app()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "the HTTP probe server did not start"
    yield f"http://127.0.0.1:{port}/mcp"
    runtime.close()  # our sessions first: an open stream would hold the shutdown
    server.should_exit = True
    thread.join(5)


def add_server(slug, *, stdio=None, url="", **extra):
    """A server added by the operator (as `manage.py tool_server add` does)."""
    if stdio is not None:
        return server_add(
            by=None,
            via=VIA_COMMAND,
            slug=slug,
            transport=Transport.STDIO,
            command=stdio[0],
            args=stdio[1:],
            **extra,
        )
    return server_add(
        by=None, via=VIA_COMMAND, slug=slug, transport=Transport.HTTP, url=url, **extra
    )


def enable(chat, server, *, tool="", policy=""):
    return toolset_set(
        by=None, via=VIA_COMMAND, chat=chat, server=server, tool_name=tool, policy=policy
    )
