"""What the fake OpenAI server answers: scripted replies and their builders.

A reply is a `Reply` (`text`, `tool_calls`, `error`, `context_length_exceeded`, `hang`,
`drop`, `text_then_error`), a plain string (shorthand for `text(...)`), or a callable taking
the parsed request body and returning one of those (see `echo`). `tests.fakes.openai_server`
re-exports every name, so tests import them from there.
"""

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

FILLER_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog")


@dataclass(frozen=True)
class ScriptedToolCall:
    id: str
    name: str
    arguments: str  # sent verbatim, so invalid JSON can be scripted too


@dataclass(frozen=True)
class Reply:
    """What the server does with one request. Build with the functions below."""

    kind: str  # "stream" (text and/or tool calls), "error", "hang", "drop"
    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    chunk_size: int | None = None  # characters per delta; None: one word per delta
    argument_chunk_size: int = 8  # characters of tool arguments per delta
    delay: float = 0.0  # seconds before each delta
    tokens_per_second: float | None = None  # instead of delay: pace by tokens
    finish_reason: str | None = None  # None: "tool_calls" with tool calls, else "stop"
    usage: bool = True  # send the usage chunk when the client asks for it
    break_after_text: str = ""  # stream: "drop" or "error" after the text (text_then_error)
    status: int = 200
    body: Any = None  # error body: dict (JSON) or str (sent as is)
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0  # hang
    after_headers: bool = False  # hang after sending 200 and the SSE headers
    linger_after_done: float = 0.0  # stream: seconds to keep the body open after [DONE]

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


def text(
    content: str = "ok",
    *,
    chunk_size: int | None = None,
    delay: float = 0.0,
    tokens_per_second: float | None = None,
    finish_reason: str = "stop",
    usage: bool = True,
    linger_after_done: float = 0.0,
) -> Reply:
    """A text answer streamed as several deltas (one word each, or `chunk_size` characters),
    `delay` seconds apart or paced at `tokens_per_second`. `usage=False` imitates servers
    that never report usage; `linger_after_done` those that send `[DONE]` but end the body
    (and then the connection) only that many seconds later."""
    return Reply(
        kind="stream",
        text=content,
        chunk_size=chunk_size,
        delay=delay,
        tokens_per_second=tokens_per_second,
        finish_reason=finish_reason,
        usage=usage,
        linger_after_done=linger_after_done,
    )


def tool_calls(
    calls: Iterable[tuple[str, str, Any] | ScriptedToolCall],
    *,
    text: str = "",
    argument_chunk_size: int = 8,
    delay: float = 0.0,
    usage: bool = True,
    finish_reason: str = "tool_calls",
) -> Reply:
    """Tool calls streamed as OpenAI does: id and name first, then the arguments JSON split
    over several deltas. Arguments: a dict (sent as JSON) or a string (sent verbatim)."""
    scripted = []
    for call in calls:
        if isinstance(call, ScriptedToolCall):
            scripted.append(call)
            continue
        call_id, name, arguments = call
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        scripted.append(ScriptedToolCall(id=call_id, name=name, arguments=arguments))
    return Reply(
        kind="stream",
        text=text,
        tool_calls=tuple(scripted),
        argument_chunk_size=max(1, argument_chunk_size),
        delay=delay,
        usage=usage,
        finish_reason=finish_reason,
    )


_ERROR_DEFAULTS = {
    400: ("invalid_request_error", None, "Bad request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", None, "You are not allowed to use this model."),
    404: (
        "invalid_request_error",
        "model_not_found",
        "The model does not exist or you do not have access to it.",
    ),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request."),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
}


def error_body(status: int, *, message: str | None = None, code: str | None = None) -> dict:
    """The JSON body OpenAI sends with an error status."""
    kind, default_code, default_message = _ERROR_DEFAULTS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, "Error.")
    )
    return {
        "error": {
            "message": message or default_message,
            "type": kind,
            "param": None,
            "code": code or default_code,
        }
    }


def error(
    status: int,
    body: Any = None,
    *,
    retry_after: float | str | None = None,
    message: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An HTTP error with OpenAI's error body (or `body`: a dict sent as JSON, a str as is).
    `retry_after`: seconds or an HTTP date, sent as the Retry-After header."""
    extra = dict(headers or {})
    if retry_after is not None:
        if isinstance(retry_after, float) and retry_after.is_integer():
            retry_after = int(retry_after)
        extra["Retry-After"] = str(retry_after)
    return Reply(
        kind="error",
        status=status,
        body=body if body is not None else error_body(status, message=message, code=code),
        headers=tuple(extra.items()),
    )


def context_length_exceeded(message: str | None = None) -> Reply:
    """400 `context_length_exceeded`, as OpenAI refuses a prompt that is too long."""
    return error(
        400,
        message=message or "This model's maximum context length was exceeded.",
        code="context_length_exceeded",
    )


def hang(seconds: float = 30.0, *, after_headers: bool = False) -> Reply:
    """Accept the request and answer nothing for `seconds` (then close the connection).
    `after_headers=True` sends 200 and the SSE headers first, then no chunk."""
    return Reply(kind="hang", seconds=seconds, after_headers=after_headers)


def drop() -> Reply:
    """Close the connection abruptly without answering."""
    return Reply(kind="drop")


def text_then_error(
    content: str = "Here is the first part",
    *,
    mode: str = "drop",
    chunk_size: int | None = None,
    delay: float = 0.0,
) -> Reply:
    """Stream `content` as deltas, then break: `mode="drop"` cuts the connection in the middle
    of the chunked body; `mode="error"` sends an `{"error": ...}` event, as OpenAI does when
    a stream fails server-side."""
    if mode not in ("drop", "error"):
        raise ValueError("mode is 'drop' or 'error'")
    return Reply(
        kind="stream", text=content, chunk_size=chunk_size, delay=delay, break_after_text=mode
    )


def last_user_text(body: dict) -> str:
    """The text of the last user message of a request body."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def echo(prefix: str = "echo: ") -> Callable[[dict], Reply]:
    """A reply (or default) that repeats the last user message."""

    def reply(body: dict) -> Reply:
        return text(f"{prefix}{last_user_text(body)}")

    return reply


def filler_text(tokens: int) -> str:
    """Plain English of about `tokens` tokens (one token per word), for long replies."""
    words = FILLER_WORDS
    return " ".join(words[i % len(words)] for i in range(max(0, tokens)))


ReplyLike = Reply | str | Callable[[dict], "Reply | str"]


def _content_text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)
