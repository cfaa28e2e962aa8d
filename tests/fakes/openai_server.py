"""A fake OpenAI-compatible server: real HTTP on loopback, real SSE, scripted replies.

    with FakeOpenAI() as fake:
        fake.script(text("Hello there"), tool_calls([("call_1", "current_time", {})]))
        ...  # point a provider (or `fake.configure(settings)`) at fake.base_url
        assert fake.last_request["messages"][-1]["content"] == "hi"

Replies are consumed one per chat completion request, first in first out; when the script
is empty the default reply answers (text "ok" unless `default=` says otherwise). A reply is
a `Reply` from `tests.fakes.openai_replies` (`text`, `tool_calls`, `error`,
`context_length_exceeded`, `hang`, `drop`, `text_then_error`), a plain string (shorthand
for `text(...)`), or a callable taking the parsed request body and returning one of those
(see `echo`).

With `context_window=N` every request's prompt is counted (`prompt_tokens`) and a request
whose prompt plus `max_tokens` exceeds N is refused with 400 `context_length_exceeded`, as
OpenAI does, and recorded in `.violations`; such a request does not consume a scripted reply.

With `tls=certificate.server_context()` (`tests.fakes.tls`) it speaks HTTPS; `.connections`
counts the connections it accepted, so a test can see whether a client reuses one.

Standalone, for benchmarks and manual runs (default replies forever):

    python -m tests.fakes.openai_server --port 8081 --tokens-per-second 50 --reply-tokens 200
"""

import argparse
import contextlib
import json
import re
import socket
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from chats.agent.tokens import count_tokens
from tests.fakes.http import FakeHTTPServer
from tests.fakes.openai_replies import (
    Reply,
    ReplyLike,
    ScriptedToolCall,
    _content_text,
    context_length_exceeded,
    drop,
    echo,
    error,
    error_body,
    filler_text,
    hang,
    last_user_text,
    text,
    text_then_error,
    tool_calls,
)

__all__ = [
    "FakeOpenAI",
    "Reply",
    "ScriptedToolCall",
    "Violation",
    "context_length_exceeded",
    "drop",
    "echo",
    "error",
    "error_body",
    "filler_text",
    "hang",
    "last_user_text",
    "text",
    "text_then_error",
    "tool_calls",
]

MESSAGE_OVERHEAD_TOKENS = 4
DEFAULT_MODEL = "fake-model"


# --- the server -------------------------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """A request refused because prompt + max_tokens did not fit the context window."""

    request_index: int
    prompt_tokens: int
    max_tokens: int
    context_window: int

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.max_tokens


@dataclass
class _State:
    requests: list[dict] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    script: deque = field(default_factory=deque)
    client_disconnects: int = 0


class FakeOpenAI:
    """A scripted OpenAI-compatible Chat Completions server on 127.0.0.1 (see module doc)."""

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        context_window: int | None = None,
        default: ReplyLike | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,  # HTTPS with this context (tests.fakes.tls)
    ):
        self.model = model
        self.tls = tls
        self.context_window = context_window
        self.default: ReplyLike = default if default is not None else text("ok")
        self.api_key = api_key  # when set, other keys get 401 invalid_api_key
        self.host = host
        self.port = port
        self._state = _State()
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> "FakeOpenAI":
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self.host, self.port), _Handler, fake=self, tls=self.tls)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-openai-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes hanging and slow replies
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # scripting

    def script(self, *replies: ReplyLike) -> "FakeOpenAI":
        """Queue replies, consumed one per chat completion request (FIFO)."""
        with self._changed:
            self._state.script.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        with self._changed:
            return len(self._state.script)

    def reset(self) -> None:
        """Forget recorded requests, violations and the remaining script."""
        with self._changed:
            self._state = _State()

    # what happened

    @property
    def requests(self) -> list[dict]:
        """Parsed JSON bodies of every chat completion request so far, in order."""
        with self._changed:
            return list(self._state.requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers of every chat completion request (lower-case names), parallel to requests."""
        with self._changed:
            return list(self._state.headers)

    @property
    def last_request(self) -> dict | None:
        with self._changed:
            return self._state.requests[-1] if self._state.requests else None

    @property
    def violations(self) -> list[Violation]:
        with self._changed:
            return list(self._state.violations)

    @property
    def connections(self) -> int:
        """Connections accepted so far (each one a TCP, and with TLS a TLS, handshake)."""
        return self._server.accepted if self._server is not None else 0

    @property
    def client_disconnects(self) -> int:
        """Streams the client closed before the server finished them."""
        with self._changed:
            return self._state.client_disconnects

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[dict]:
        """Block until at least `n` requests arrived; AssertionError after `timeout` s."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._state.requests) >= n, timeout):
                raise AssertionError(
                    f"expected {n} requests within {timeout} s, got {len(self._state.requests)}"
                )
            return list(self._state.requests)

    def wait_until(self, predicate: Callable[["FakeOpenAI"], bool], timeout: float = 5.0):
        """Block until `predicate(fake)` holds (checked on every recorded event)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"condition not met within {timeout} s")
                self._changed.wait(min(remaining, 0.05))

    def prompt_tokens(self, body: dict) -> int:
        """The prompt size of a request as this server counts it: per message its text, its
        images (OpenAI's tile rule, `_image_tokens`), its tool call arguments and 4 tokens of
        overhead, plus `json.dumps(tools)`."""
        total = 0
        for message in body.get("messages") or []:
            total += MESSAGE_OVERHEAD_TOKENS + count_tokens(_content_text(message.get("content")))
            if isinstance(message.get("content"), list):
                total += sum(_image_tokens(part) for part in message["content"])
            for call in message.get("tool_calls") or []:
                total += count_tokens(str((call.get("function") or {}).get("arguments") or ""))
        if body.get("tools"):
            total += count_tokens(json.dumps(body["tools"]))
        return total

    # Django settings

    def configure(self, settings, **overrides) -> None:
        """Point the LLM_* settings (pytest-django's `settings` fixture) at this server, with
        instant retries and a short timeout; keyword arguments override (e.g.
        LLM_MAX_RETRIES=0). The provider cache is reset by the settings change."""
        values = {
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": self.base_url,
            "LLM_API_KEY": self.api_key or "",
            "LLM_MODEL": self.model,
            "LLM_TIMEOUT_SECONDS": 10.0,
            "LLM_RETRY_BASE_SECONDS": 0.0,
            "LLM_RETRY_MAX_SECONDS": 0.0,
        }
        if self.context_window:
            values["LLM_CONTEXT_TOKENS"] = self.context_window
        values.update(overrides)
        for name, value in values.items():
            setattr(settings, name, value)

    # request handling (runs in the server's threads)

    def _record(self, body: dict, headers: dict[str, str]) -> int:
        with self._changed:
            self._state.requests.append(body)
            self._state.headers.append(headers)
            self._changed.notify_all()
            return len(self._state.requests) - 1

    def _note_violation(self, violation: Violation) -> None:
        with self._changed:
            self._state.violations.append(violation)
            self._changed.notify_all()

    def _note_disconnect(self) -> None:
        with self._changed:
            self._state.client_disconnects += 1
            self._changed.notify_all()

    def _next_reply(self, body: dict) -> Reply:
        with self._changed:
            item = self._state.script.popleft() if self._state.script else self.default
        if callable(item) and not isinstance(item, Reply):
            item = item(body)
        if isinstance(item, str):
            item = text(item)
        if not isinstance(item, Reply):
            raise TypeError(f"a scripted reply must be a Reply, a str or a callable, not {item!r}")
        return item

    def _check_request(self, body: dict, headers: dict[str, str], index: int) -> Reply | None:
        """A refusal the server makes on its own (bad key, context too long), or None."""
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            return error(401)
        if self.context_window:
            prompt = self.prompt_tokens(body)
            max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
            if prompt + max_tokens > self.context_window:
                self._note_violation(
                    Violation(
                        request_index=index,
                        prompt_tokens=prompt,
                        max_tokens=max_tokens,
                        context_window=self.context_window,
                    )
                )
                return context_length_exceeded(
                    f"This model's maximum context length is {self.context_window} tokens. "
                    f"However, you requested {prompt + max_tokens} tokens ({prompt} in the "
                    f"messages, {max_tokens} in the completion). Please reduce the length of "
                    "the messages or completion."
                )
        return None


class _Server(FakeHTTPServer):
    fake: FakeOpenAI


class _ClientGone(Exception):
    """The client closed the connection while we were answering."""


class _Stopping(Exception):
    """The server is shutting down in the middle of an answer."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked SSE, like real servers
    server: _Server

    def log_message(self, format, *args):
        pass

    def finish(self):
        with contextlib.suppress(OSError):
            super().finish()

    @property
    def fake(self) -> FakeOpenAI:
        return self.server.fake

    # routes

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.fake.model,
                            "object": "model",
                            "created": 0,
                            "owned_by": "fake-openai",
                        }
                    ],
                },
            )
        else:
            self._send_json(404, error_body(404, message=f"No route for GET {path}."))

    def do_POST(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, error_body(404, message=f"No route for POST {path}."))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_json(400, error_body(400, message="The body is not valid JSON."))
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        index = self.fake._record(body, headers)
        reply = self.fake._check_request(body, headers, index) or self.fake._next_reply(body)
        try:
            self._answer(reply, body)
        except _ClientGone:
            self.fake._note_disconnect()
            self.close_connection = True
        except _Stopping:
            self.close_connection = True

    # answers

    def _answer(self, reply: Reply, body: dict) -> None:
        if reply.kind == "error":
            self._send_error_reply(reply)
        elif reply.kind == "drop":
            self._cut()
        elif reply.kind == "hang":
            if reply.after_headers and body.get("stream"):
                self._start_sse()
            self.fake._stopping.wait(reply.seconds)
            self._cut()
        elif body.get("stream"):
            self._stream(reply, body)
        else:
            self._complete(reply, body)

    def _send_error_reply(self, reply: Reply) -> None:
        if isinstance(reply.body, str):
            payload, content_type = reply.body.encode(), "text/plain; charset=utf-8"
        else:
            payload, content_type = json.dumps(reply.body).encode(), "application/json"
        self._send_bytes(reply.status, payload, content_type, reply.headers)

    def _send_json(self, status: int, data: dict) -> None:
        self._send_bytes(status, json.dumps(data).encode(), "application/json", ())

    def _send_bytes(self, status, payload: bytes, content_type: str, headers) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone from exc

    def _cut(self) -> None:
        """Close the connection now, mid-whatever."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _start_sse(self) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone from exc

    def _write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError as exc:
            raise _ClientGone from exc

    def _event(self, payload: dict | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self._write_chunk(f"data: {data}\n\n".encode())

    def _pause(self, reply: Reply, piece: str) -> None:
        seconds = reply.delay
        if reply.tokens_per_second:
            seconds = max(1, count_tokens(piece)) / reply.tokens_per_second
        if seconds > 0 and self.fake._stopping.wait(seconds):
            self._cut()
            raise _Stopping

    def _stream(self, reply: Reply, body: dict) -> None:
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        model = body.get("model") or self.fake.model
        want_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict, finish_reason: str | None = None) -> dict:
            data = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
            }
            if want_usage:
                data["usage"] = None
            return data

        self._start_sse()
        self._event(chunk({"role": "assistant", "content": "", "refusal": None}))
        for piece in _split_text(reply.text, reply.chunk_size):
            self._pause(reply, piece)
            self._event(chunk({"content": piece}))
        if reply.break_after_text == "drop":
            self._cut()  # no terminating chunk: the client sees an incomplete body
            return
        if reply.break_after_text == "error":
            self._event(
                {"error": error_body(500, message="The stream failed on the server.")["error"]}
            )
            self._write_chunk(b"")
            return
        for index, call in enumerate(reply.tool_calls):
            self._pause(reply, call.name)
            self._event(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            size = reply.argument_chunk_size
            for start in range(0, len(call.arguments), size):
                fragment = call.arguments[start : start + size]
                self._pause(reply, fragment)
                self._event(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                )
        self._event(chunk({}, reply.finish))
        if want_usage and reply.usage:
            usage = self._usage(reply, body)
            self._event(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": "fp_fake",
                    "choices": [],
                    "usage": usage,
                }
            )
        self._event("[DONE]")
        if reply.linger_after_done:
            self.fake._stopping.wait(reply.linger_after_done)
            self._cut()
            return
        self._write_chunk(b"")  # the terminating zero-length chunk

    def _complete(self, reply: Reply, body: dict) -> None:
        if reply.break_after_text:
            self._cut()
            return
        pause = reply.delay * len(_split_text(reply.text, reply.chunk_size))
        if reply.tokens_per_second:
            pause = max(1, count_tokens(reply.text)) / reply.tokens_per_second
        if pause > 0 and self.fake._stopping.wait(pause):
            self._cut()
            return
        message: dict = {"role": "assistant", "content": reply.text or None, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in reply.tool_calls
            ]
        data = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.fake.model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish}
            ],
        }
        if reply.usage:
            data["usage"] = self._usage(reply, body)
        self._send_json(200, data)

    def _usage(self, reply: Reply, body: dict) -> dict:
        prompt = self.fake.prompt_tokens(body)
        completion = count_tokens(reply.text) + sum(
            count_tokens(call.name) + count_tokens(call.arguments) for call in reply.tool_calls
        )
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }


def _image_tokens(part) -> int:
    """What an image part costs as OpenAI counts it at "high" detail: the image fit in
    2048 × 2048, its short side scaled to 768, 170 per 512-pixel tile plus 85 (the size
    read from the data: URL's bytes; a URL that is not data: costs the base 85)."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return 0
    url = str((part.get("image_url") or {}).get("url") or "")
    if not url.startswith("data:"):
        return 85
    import base64
    import io
    import math

    from PIL import Image

    width, height = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size
    for limit, use_max in ((2048, True), (768, False)):
        side = max(width, height) if use_max else min(width, height)
        if side > limit:
            width, height = width * limit / side, height * limit / side
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def _split_text(content: str, chunk_size: int | None) -> list[str]:
    if not content:
        return []
    if chunk_size:
        return [content[i : i + chunk_size] for i in range(0, len(content), chunk_size)]
    return re.findall(r"\s*\S+|\s+$", content)


# --- standalone -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="A fake OpenAI-compatible server answering every request with filler text."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--tokens-per-second", type=float, default=None)
    parser.add_argument("--reply-tokens", type=int, default=50)
    parser.add_argument("--context-window", type=int, default=None)
    args = parser.parse_args(argv)

    reply = text(filler_text(args.reply_tokens), tokens_per_second=args.tokens_per_second)
    fake = FakeOpenAI(
        model=args.model,
        host=args.host,
        port=args.port,
        context_window=args.context_window,
        default=reply,
    )
    fake.start()
    pace = f"{args.tokens_per_second:g} tokens/s" if args.tokens_per_second else "unpaced"
    print(
        f"Fake OpenAI server at {fake.base_url} (model {args.model!r}, "
        f"{args.reply_tokens}-token replies, {pace}). Ctrl-C stops it.",
        flush=True,
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
