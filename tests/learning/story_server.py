"""The staging cluster of the deploy story as a real MCP server, shared by
`tests/learning/test_story.py` and `bench/learning_bench.py`.

`build(cluster)` is a streamable-HTTP server made with the SDK's own `MCPServer`, exposing
the cluster's operations (`build_image`, `push_image`, `kubectl_apply`,
`kubectl_rollout_status`, `kubectl_get_pods`, `http_check`) on the in-memory
`story_tools.StagingCluster`; a refusal of the cluster is the tool's error result (the SDK's
`ToolError`), as a real server's would be. `staging_server()` serves it on a loopback port
and adds it to the hub as the tool server `staging`, as the operator's
`manage.py tool_server add staging --url …` does; nothing is on in any chat until a
decider turns it on (`turn_on`). The model then sees its tools as `staging__<tool>`.
"""

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from tests.learning.story_tools import TOOL_SPECS, ClusterError, StagingCluster
from toolservers.models import Policy, ToolServer, Transport
from toolservers.provider import tool_server_tools
from toolservers.runtime import runtime
from toolservers.services import VIA_COMMAND, server_add, toolset_set

SLUG = "staging"
READ_ONLY = ToolAnnotations(read_only_hint=True)
# Building, pushing and applying change things (not destructive, not read-only): by the
# annotations a call would wait for approval; the story's chats allow them (`turn_on`).
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False)


def tool_name(operation: str) -> str:
    """The function name the model sees for one of the cluster's operations."""
    return f"{SLUG}__{operation}"


def build(cluster: StagingCluster) -> MCPServer:
    """The MCP server of `cluster`: one tool per operation, with its description."""
    server = MCPServer(SLUG)

    def run(operation: str, **arguments) -> str:
        try:
            return cluster.run(operation, arguments)
        except ClusterError as exc:
            raise ToolError(str(exc)) from None

    def described(operation: str, annotations: ToolAnnotations):
        return server.tool(description=TOOL_SPECS[operation][0], annotations=annotations)

    @described("build_image", CHANGES)
    def build_image(app: str, tag: str) -> str:
        return run("build_image", app=app, tag=tag)

    @described("push_image", CHANGES)
    def push_image(image: str) -> str:
        return run("push_image", image=image)

    @described("kubectl_apply", CHANGES)
    def kubectl_apply(app: str, image: str) -> str:
        return run("kubectl_apply", app=app, image=image)

    @described("kubectl_rollout_status", READ_ONLY)
    def kubectl_rollout_status(app: str) -> str:
        return run("kubectl_rollout_status", app=app)

    @described("kubectl_get_pods", READ_ONLY)
    def kubectl_get_pods(app: str) -> str:
        return run("kubectl_get_pods", app=app)

    @described("http_check", READ_ONLY)
    def http_check(url: str) -> str:
        return run("http_check", url=url)

    return server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Staging:
    """The running story server: its cluster (the state the tests read), URL and hub row."""

    cluster: StagingCluster
    url: str
    server: ToolServer


@contextlib.contextmanager
def staging_server(cluster: StagingCluster | None = None) -> Iterator[Staging]:
    """Serve the cluster over streamable HTTP on loopback for the block and add it to the hub
    as the operator does; the hub's sessions to it are closed after."""
    import uvicorn

    cluster = cluster or StagingCluster()
    port = _free_port()
    http = uvicorn.Server(
        uvicorn.Config(
            build(cluster).streamable_http_app(),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not http.started and time.monotonic() < deadline:
        time.sleep(0.02)
    if not http.started:
        raise RuntimeError("the staging MCP server did not start")
    url = f"http://127.0.0.1:{port}/mcp"
    tool_server_tools.forget()  # tool ids listed by an earlier run must not be reused
    runtime.forget_failures()
    try:
        server = server_add(by=None, via=VIA_COMMAND, slug=SLUG, transport=Transport.HTTP, url=url)
        yield Staging(cluster=cluster, url=url, server=server)
    finally:
        runtime.close()  # the hub's sessions first: an open stream would hold the shutdown
        tool_server_tools.forget()
        http.should_exit = True
        thread.join(5)
        # Its address dies with it: a later block (the bench's next part) adds its own.
        ToolServer.objects.filter(slug=SLUG, url=url).delete()


def turn_on(staging: Staging, chat, *, by=None) -> None:
    """`by` (a decider of `chat`; None: the operator at the shell) turns the staging tools
    on there, allowed without asking: the team trusts the agent with staging deploys in
    this chat."""
    via = {} if by is not None else {"via": VIA_COMMAND}
    toolset_set(by=by, chat=chat, server=staging.server, policy=Policy.ALLOW, **via)
