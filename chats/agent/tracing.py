"""Trace spans of the engine: the turn, each model call and each tool call.

Only the OpenTelemetry API is used here: without an SDK tracer provider (traces are off by
default; `operations.tracing` installs one when TRACES_ENABLED is on) every span is a no-op
that records nothing, and the guards on `is_recording()` skip building attributes.

What a span may carry: ids (chat, turn), names (channel, model, tool, tool server),
counts (tokens, iterations), outcomes and error kinds. Never message text, prompts,
replies, tool arguments or tool results, and never an exception's message (it may quote
any of those): only its type.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from chats.agent.llm.base import Finish, LLMError, ProviderInfo, TextDelta, ToolCall, Usage

tracer = trace.get_tracer("hermes.agent")

# Tools that come with the hub (no tool server) are reported as served by it.
HUB_SERVER = "hub"


def _error(span: Span, kind: str) -> None:
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))


@contextmanager
def turn_span(*, turn, chat, resumed: bool) -> Iterator[Span]:
    """The span of one run of a turn (current while it runs: model and tool calls are its
    children); `turn_outcome` records how it ended."""
    with tracer.start_as_current_span(
        "turn", record_exception=False, set_status_on_exception=False
    ) as span:
        if span.is_recording():
            span.set_attributes(
                {
                    "hermes.turn.id": turn.pk,
                    "hermes.chat.id": chat.pk,
                    "hermes.chat.channel": chat.channel,
                    "hermes.turn.resumed": resumed,
                }
            )
        try:
            yield span
        except BaseException as exc:
            if span.is_recording():
                _error(span, type(exc).__name__)
            raise


def turn_outcome(span: Span, *, turn, lease_lost: bool, error_kind: str = "") -> None:
    """How the run ended: the turn's status (completed, failed, interrupted, waiting) or
    `lease_lost`, with its counters; a failed turn is an error span of `error_kind`."""
    if not span.is_recording():
        return
    outcome = "lease_lost" if lease_lost else str(turn.status)
    span.set_attributes(
        {
            "hermes.turn.outcome": outcome,
            "hermes.turn.iterations": turn.iterations,
            "gen_ai.request.model": turn.model or "",
            "gen_ai.usage.input_tokens": turn.prompt_tokens,
            "gen_ai.usage.output_tokens": turn.completion_tokens,
        }
    )
    if outcome == "failed":
        _error(span, error_kind or "failed")


def model_stream(
    events: Iterator, *, info: ProviderInfo, purpose: str, max_tokens: int | None = None
) -> Iterator:
    """Pass a provider's stream through, inside a span of the model call: the model, the
    tokens in and out, why it finished, when the first token came (an event and
    `hermes.model.first_token_ms`) and, when it fails, the error's kind."""
    span = tracer.start_span(f"chat {info.model}", kind=SpanKind.CLIENT)
    if not span.is_recording():
        span.end()
        yield from events
        return
    span.set_attributes(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": info.name,
            "gen_ai.request.model": info.model,
            "hermes.model.purpose": purpose,
        }
    )
    if max_tokens:
        span.set_attribute("gen_ai.request.max_tokens", max_tokens)
    started = time.monotonic()
    first = True
    tokens_in = tokens_out = tool_calls = 0
    finish = ""
    try:
        for event in events:
            if first and isinstance(event, TextDelta | ToolCall):
                first = False
                first_ms = int((time.monotonic() - started) * 1000)
                span.add_event("first_token")
                span.set_attribute("hermes.model.first_token_ms", first_ms)
            if isinstance(event, Usage):
                tokens_in += event.prompt_tokens
                tokens_out += event.completion_tokens
            elif isinstance(event, ToolCall):
                tool_calls += 1
            elif isinstance(event, Finish):
                finish = event.reason
            yield event
    except GeneratorExit:
        finish = finish or "closed"  # the caller stopped reading
        raise
    except LLMError as exc:
        _error(span, exc.kind)
        raise
    except BaseException as exc:
        _error(span, type(exc).__name__)
        raise
    finally:
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": tokens_in,
                "gen_ai.usage.output_tokens": tokens_out,
                "hermes.model.tool_calls": tool_calls,
            }
        )
        if finish:
            span.set_attribute("gen_ai.response.finish_reasons", [finish])
        span.end()


def tool_server(tool) -> str:
    """The tool server a tool comes from (its slug), or `hub` for the hub's own tools."""
    return getattr(tool, "server", "") or HUB_SERVER


def tool_span(*, name: str, call_id: str, tool) -> Span:
    """Start the span of one tool call (not made current: a tool runs in a thread of its
    own). End it with `tool_span_end`."""
    span = tracer.start_span(f"execute_tool {name}")
    if span.is_recording():
        span.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "hermes.tool.server": tool_server(tool) if tool is not None else "",
            }
        )
    return span


def tool_span_end(span: Span, *, outcome: str, duration_ms: int | None = None) -> None:
    """Record how the call ended (`ok`, `error`, `waiting` for a decision, or an exception's
    type name) and end the span."""
    if span.is_recording():
        span.set_attribute("hermes.tool.outcome", outcome)
        if duration_ms is not None:
            span.set_attribute("hermes.tool.duration_ms", duration_ms)
        if outcome not in ("ok", "waiting"):
            _error(span, "tool_error" if outcome == "error" else outcome)
    span.end()
