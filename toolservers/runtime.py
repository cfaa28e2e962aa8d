"""Long-lived MCP client sessions, one per tool server per worker process.

One background thread runs an asyncio loop that owns every session (the SDK is async and
its sessions must stay in the task that opened them); sync callers (tool handlers in the
turn's worker threads) submit coroutines to it and wait with a bound. A session opens on
first use and stays open; a call past its timeout is cancelled and the server restarted
(a hung stdio child is killed); a session that failed is dropped and reopened by the next
call. Everything that goes wrong becomes a `ToolServerError` whose text the model can act on.

A stdio child's environment is the base below plus the server's configured variables,
whose references are resolved from the hub's environment now: never the hub's whole
environment (SECRET_KEY, DATABASE_URL, REDIS_URL, model keys).

The MCP SDK (about 40 MiB once imported) loads with the first session, in the process that
opens it: never in the web process or a worker that calls no tool server.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    import mcp_types
    from mcp.client.session import ClientSession

from toolservers import sandbox
from toolservers.references import reference_refusal

logger = logging.getLogger(__name__)

# What a stdio child inherits from the hub besides its configured variables. The SDK adds
# its own short list of harmless ones (HOME, LOGNAME, PATH, SHELL, TERM, USER).
BASE_ENV_NAMES = ("PATH", "HOME", "LANG", "LC_ALL")
# After a server failed (a crash, a hang, a failed start), the next call reopens it at once;
# after further failures in a row, it waits 1, 2, 4 … up to 60 seconds before trying again.
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0
SESSION_HEADER = "mcp-session-id"
STDERR_TAIL_BYTES = 2000  # of a stdio child's error output, for "could not be started"
STDERR_WAIT_SECONDS = 1.0
LAST_ERROR_CHARS = 800
STOP_GRACE_SECONDS = 6.0  # the SDK's own stop: 2 s to exit, 2 s after SIGTERM, then SIGKILL


STREAMABLE_ONLY = (
    "; the hub speaks only streamable HTTP: if this URL is of the older SSE transport (often "
    "ending in /sse), use the server's streamable-HTTP endpoint instead (often /mcp)"
)


class ToolServerError(Exception):
    """A failure the model is told about (the message is written for it)."""


class _SessionLost(Exception):
    """The HTTP server does not know the session any more; the request did not run."""


@dataclass(frozen=True)
class ServerSpec:
    """A server's connection settings with every env reference resolved."""

    slug: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    cwd: str = ""
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    call_timeout: float = 30.0

    @classmethod
    def from_server(cls, server) -> ServerSpec:
        """Resolve `server`'s references; a missing hub variable is a ToolServerError."""
        return cls(
            slug=server.slug,
            transport=server.transport,
            command=server.command,
            args=tuple(server.args or ()),
            cwd=server.cwd,
            env=_resolve(server.slug, server.env),
            url=server.url,
            headers=_resolve(server.slug, server.headers),
            call_timeout=server.call_timeout_seconds,
        )


def _resolve(slug: str, values: dict | None) -> tuple[tuple[str, str], ...]:
    resolved = []
    for name, value in sorted((values or {}).items()):
        if isinstance(value, dict):
            ref = value.get("env", "")
            if refusal := reference_refusal(str(ref)):  # the operator's list, read now
                raise ToolServerError(f"the tool server {slug} is misconfigured: {refusal}")
            if ref not in os.environ:
                raise ToolServerError(
                    f"the tool server {slug} is misconfigured: the hub's environment "
                    f"variable {ref} is not set (ask an operator)"
                )
            value = os.environ[ref]
        resolved.append((str(name), str(value)))
    return tuple(resolved)


def child_environment(spec: ServerSpec) -> dict[str, str]:
    """The environment a stdio child gets (before the SDK adds its harmless defaults)."""
    base = {name: os.environ[name] for name in BASE_ENV_NAMES if name in os.environ}
    return base | dict(spec.env)


def describe(exc: BaseException) -> str:
    """One line for the model: the innermost cause of `exc` (task groups wrap it)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


class _StderrTail(asyncio.Protocol):
    """A stdio child's stderr, of which the last STDERR_TAIL_BYTES are kept."""

    def __init__(self):
        self._data = bytearray()
        self._ended = asyncio.Event()
        self._transport = None

    async def open(self):
        """The write end to give the child (closed by the caller once it is spawned)."""
        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(
            lambda: self, os.fdopen(read_fd, "rb", buffering=0)
        )
        return os.fdopen(write_fd, "w")

    def data_received(self, data: bytes) -> None:
        self._data += data
        del self._data[:-STDERR_TAIL_BYTES]

    def connection_lost(self, exc) -> None:
        self._ended.set()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def tail(self) -> str:
        """The last lines written (waiting a moment for a dying child's last words)."""
        if self._transport is None:
            return ""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), STDERR_WAIT_SECONDS)
        text = self._data.decode("utf-8", "replace").strip()
        return " | ".join(line.strip() for line in text.splitlines()[-5:] if line.strip())


class _Connection:
    """One open session, owned by one task of the runtime's loop."""

    def __init__(self, spec: ServerSpec, on_list_changed=None):
        self.spec = spec
        self._on_list_changed = on_list_changed
        self.session: ClientSession | None = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._stderr = _StderrTail()
        self.stderr_tail = ""  # the end of what a stdio child that failed to start wrote
        # Set when an HTTP server answered that it does not know this session (it was
        # restarted): the request was refused before it ran, so it may be sent again on a
        # new session.
        self.session_lost = False
        self.refused_status = 0  # a 4xx answer to the handshake (an SSE-only URL, …)

    async def open(self, timeout: float) -> ClientSession:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._own(), name=f"mcp-{self.spec.slug}")
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            tail = await self._stderr.tail()
            await self.close()
            said = f"; its error output ends: {tail}" if tail else ""
            raise ToolServerError(
                f"the tool server {self.spec.slug} did not start within {timeout:g} s{said}"
            ) from None

    async def _own(self) -> None:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        spec = self.spec
        try:
            async with AsyncExitStack() as stack:
                if spec.transport == "stdio":
                    wrapped = await asyncio.to_thread(
                        sandbox.wrap, spec.command, spec.args, spec.cwd or None
                    )
                    params = StdioServerParameters(
                        command=wrapped.command,
                        args=list(wrapped.args),
                        env=child_environment(spec),
                        cwd=wrapped.cwd,
                    )
                    # The child's stderr is not the hub's log; its tail says why it failed.
                    errlog = await self._stderr.open()
                    try:
                        read, write = await stack.enter_async_context(
                            stdio_client(params, errlog=errlog)
                        )
                    finally:
                        errlog.close()  # the child has its own copy
                    stack.callback(self._stderr.close)
                else:
                    client = await stack.enter_async_context(
                        create_mcp_http_client(headers=dict(spec.headers) or None)
                    )
                    client.event_hooks["response"].append(self._watch_session)
                    read, write = await stack.enter_async_context(
                        streamable_http_client(spec.url, http_client=client)
                    )
                session = await stack.enter_async_context(
                    ClientSession(read, write, message_handler=self._message)
                )
                await session.initialize()
                self.session = session
                self._ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to the waiting caller
            if self._ready is not None and not self._ready.done():
                if isinstance(exc, Exception):
                    self.stderr_tail = await self._stderr.tail()
                self._ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError())
            elif not isinstance(exc, asyncio.CancelledError):
                logger.info("tool server %s session ended: %s", spec.slug, describe(exc))
        finally:
            self.session = None

    async def _watch_session(self, response) -> None:
        """Notice a server that no longer knows our session: 404 for a request that carried
        the session's id (what the spec says), or 400 saying so (what some servers say)."""
        if not response.request.headers.get(SESSION_HEADER):
            if 400 <= response.status_code < 500:  # refused before any session: say so
                self.refused_status = response.status_code
            return
        if response.status_code == 404:
            self.session_lost = True
        elif response.status_code == 400:
            body = (await response.aread())[:2000].decode("utf-8", "replace").lower()
            if "session" in body:
                self.session_lost = True

    async def _message(self, message) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification) and self._on_list_changed:
            self._on_list_changed(self.spec.slug)

    async def close(self) -> None:
        self._stop.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), STOP_GRACE_SECONDS)
        except (TimeoutError, Exception):  # noqa: BLE001 - a stuck close is cancelled instead
            self._task.cancel()


class Runtime:
    """The process's sessions; safe to call from any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: dict[str, _Connection] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        # slug -> (failures in a row, monotonic time before which no reopen, last error)
        self._failures: dict[str, tuple[int, float, str]] = {}
        self._list_changed: set[str] = set()  # servers that said their tool list changed

    # --- the loop thread -------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                # First use, or a forked worker: the parent's loop thread is not here.
                self._pid = os.getpid()
                self._connections, self._opening, self._failures = {}, {}, {}
                self._loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._loop.run_forever, name="hermes-mcp", daemon=True
                )
                thread.start()
            return self._loop

    def _run(self, coro, timeout: float):
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise ToolServerError("the tool server runtime did not answer in time") from None

    # --- sessions (run on the loop) ------------------------------------------------------

    async def _session(self, spec: ServerSpec) -> ClientSession:
        lock = self._opening.setdefault(spec.slug, asyncio.Lock())
        async with lock:
            conn = self._connections.get(spec.slug)
            if conn is not None and conn.spec == spec and conn.session is not None:
                return conn.session
            if conn is not None:  # changed settings, or a session that ended
                self._drop(spec.slug)
            count, not_before, last = self._failures.get(spec.slug, (0, 0.0, ""))
            wait = not_before - time.monotonic()
            if wait > 0:
                when = f"in {math.ceil(wait)} s" if wait >= 1 else "in a moment"
                raise ToolServerError(
                    f"the tool server {spec.slug} failed {count} times in a row and is "
                    f"started again {when} (last error: {last})"
                )
            conn = _Connection(spec, on_list_changed=self._mark_list_changed)
            timeout = settings.TOOLSERVERS_CONNECT_TIMEOUT_SECONDS
            try:
                session = await conn.open(timeout)
            except ToolServerError as exc:
                self._failed(spec.slug, str(exc))
                raise
            except sandbox.SandboxError as exc:
                error = ToolServerError(f"the tool server {spec.slug} was not started: {exc}")
                self._failed(spec.slug, str(error))
                raise error from exc
            except Exception as exc:  # noqa: BLE001 - any failure to connect is the model's news
                said = f"; its error output ends: {conn.stderr_tail}" if conn.stderr_tail else ""
                if conn.refused_status or spec.url.rstrip("/").endswith("/sse"):
                    said = f" (HTTP {conn.refused_status or '?'}){STREAMABLE_ONLY}"
                error = ToolServerError(
                    f"the tool server {spec.slug} could not be started or reached: "
                    f"{describe(exc)}{said}"
                )
                self._failed(spec.slug, str(error))
                raise error from exc
            self._connections[spec.slug] = conn
            return session

    def _failed(self, slug: str, error: str) -> None:
        count = self._failures.get(slug, (0, 0.0, ""))[0] + 1
        delay = 0.0 if count == 1 else BACKOFF_BASE_SECONDS * 2 ** (count - 2)
        delay = min(delay, BACKOFF_MAX_SECONDS)
        self._failures[slug] = (count, time.monotonic() + delay, error[:LAST_ERROR_CHARS])

    def _drop(self, slug: str, error: str = "") -> None:
        """Forget a session and close it in the background (a hung child is killed)."""
        if error:
            self._failed(slug, error)
        conn = self._connections.pop(slug, None)
        if conn is not None:
            asyncio.get_running_loop().create_task(conn.close())

    def _session_lost(self, slug: str) -> bool:
        """Did the server answer that it no longer knows our session? Then the session is
        dropped (not counted as a failure) for a new one."""
        conn = self._connections.get(slug)
        if conn is None or not conn.session_lost:
            return False
        self._drop(slug)
        return True

    async def _with_session(self, spec: ServerSpec, operation):
        """`operation(session)` on the server's session; once more on a new session when
        the server said it does not know ours (restarted: it never ran the request, so
        sending it again cannot run it twice)."""
        session = await self._session(spec)
        try:
            return await operation(session)
        except _SessionLost:
            session = await self._session(spec)
            try:
                return await operation(session)
            except _SessionLost:
                error = ToolServerError(
                    f"the tool server {spec.slug} refused a new session right after it was "
                    "opened; try again later"
                )
                self._failed(spec.slug, str(error))
                raise error from None

    async def _list_tools(self, spec: ServerSpec) -> list[mcp_types.Tool]:
        tools = await self._with_session(spec, lambda session: self._list_once(spec, session))
        self._failures.pop(spec.slug, None)
        return tools

    async def _list_once(self, spec: ServerSpec, session: ClientSession) -> list[mcp_types.Tool]:
        import mcp_types

        tools, cursor = [], None
        try:
            for _ in range(50):  # pages; a server paging forever is not followed
                params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await asyncio.wait_for(session.list_tools(params=params), spec.call_timeout)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        except Exception as exc:  # noqa: BLE001 - timeouts, error answers, broken transports
            if self._session_lost(spec.slug):
                raise _SessionLost from exc
            error = ToolServerError(
                f"the tool server {spec.slug} did not list its tools: {describe(exc)}"
            )
            self._drop(spec.slug, str(error))
            raise error from exc
        return tools

    async def _call_tool(self, spec: ServerSpec, name: str, arguments: dict):
        result = await self._with_session(
            spec, lambda session: self._call_once(spec, session, name, arguments)
        )
        self._failures.pop(spec.slug, None)
        return result

    async def _call_once(self, spec: ServerSpec, session: ClientSession, name: str, arguments):
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED

        try:
            return await asyncio.wait_for(session.call_tool(name, arguments), spec.call_timeout)
        except TimeoutError:
            error = ToolServerError(
                f"the tool {name} on {spec.slug} did not answer within {spec.call_timeout:g} s; "
                "the call was cancelled and the server restarted. Try again, or another way."
            )
            self._drop(spec.slug, str(error))
            raise error from None
        except Exception as exc:  # noqa: BLE001 - sorted below
            if self._session_lost(spec.slug):
                raise _SessionLost from exc
            if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
                self._failures.pop(spec.slug, None)  # the server answered: it is alive
                raise ToolServerError(f"the tool {name} on {spec.slug} failed: {exc}") from exc
            if isinstance(exc, MCPError):  # a connection that closed under the call
                error = ToolServerError(
                    f"the tool server {spec.slug} closed the connection during {name} "
                    "(it may have crashed); it will be restarted on the next call"
                )
            else:  # malformed answers, broken transports
                error = ToolServerError(
                    f"the tool {name} on {spec.slug} failed: {describe(exc)}; "
                    "the server was restarted"
                )
            self._drop(spec.slug, str(error))
            raise error from exc

    async def _close(self, slug: str | None) -> None:
        if slug:
            self._failures.pop(slug, None)
        else:
            self._failures.clear()
        conns = (
            [self._connections.pop(slug)]
            if slug in self._connections
            else ([] if slug else [self._connections.pop(s) for s in list(self._connections)])
        )
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    # --- the sync API -------------------------------------------------------------------

    def list_tools(self, spec: ServerSpec) -> list[mcp_types.Tool]:
        """The tools `spec`'s server announces now (opening its session if needed)."""
        bound = settings.TOOLSERVERS_CONNECT_TIMEOUT_SECONDS + spec.call_timeout * 2 + 5
        return self._run(self._list_tools(spec), bound)

    def list_tools_many(self, specs: list[ServerSpec]) -> dict[str, list | ToolServerError]:
        """`list_tools` of several servers at once, waited for with one bound (the longest
        single one): each slug's tools, or the ToolServerError it failed with."""

        async def one(spec: ServerSpec):
            try:
                return await self._list_tools(spec)
            except ToolServerError as exc:
                return exc

        async def every():
            return await asyncio.gather(*(one(spec) for spec in specs))

        bound = settings.TOOLSERVERS_CONNECT_TIMEOUT_SECONDS + 5
        bound += max((spec.call_timeout * 2 for spec in specs), default=0)
        try:
            results = self._run(every(), bound)
        except ToolServerError as exc:
            return {spec.slug: exc for spec in specs}
        return {spec.slug: result for spec, result in zip(specs, results, strict=True)}

    def call_tool(self, spec: ServerSpec, name: str, arguments: dict):
        """The server's CallToolResult; any failure is a ToolServerError."""
        bound = settings.TOOLSERVERS_CONNECT_TIMEOUT_SECONDS + spec.call_timeout + 5
        return self._run(self._call_tool(spec, name, arguments), bound)

    def close(self, slug: str | None = None) -> None:
        """Close one server's session (or all): the next call opens a new one."""
        if self._loop is None or self._pid != os.getpid():
            return
        self._run(self._close(slug), STOP_GRACE_SECONDS * 2 + 1)

    def _mark_list_changed(self, slug: str) -> None:
        with self._lock:
            self._list_changed.add(slug)

    def take_list_changed(self, slug: str) -> bool:
        """Did `slug`'s server announce a changed tool list since the last time asked?"""
        with self._lock:
            if slug in self._list_changed:
                self._list_changed.discard(slug)
                return True
            return False

    def forget_failures(self) -> None:
        """Drop the restart backoff of every server (tests; an operator's fix)."""
        self._failures = {}

    def is_connected(self, slug: str) -> bool:
        conn = self._connections.get(slug)
        return conn is not None and conn.session is not None


runtime = Runtime()
