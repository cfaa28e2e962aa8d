"""Running a tool call: parse, validate against the tool's schema, run with a timeout.

Whatever goes wrong (unknown tool, invalid JSON, arguments that break the schema, an
exception, a timeout) becomes an error result that the model sees, and the turn goes on.
"""

import functools
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import jsonschema
from django.conf import settings
from django.db import close_old_connections, connections

from chats.agent import tracing
from chats.agent.registry import Gate, Tool, ToolError, ToolFile, TurnContext

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1024)
def _checked_validator(schema_json: str):
    """A validator for a schema, the schema checked once (`jsonschema.validate` checks it on
    every call, most of the cost of validating a small call); raises SchemaError."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate(arguments: dict, schema: dict) -> None:
    """What `jsonschema.validate` does (the same best-matching error), schema checks cached."""
    validator = _checked_validator(json.dumps(schema, sort_keys=True, default=str))
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is not None:
        raise error


MAX_RESULT_CHARS = 32_000
_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hermes-tool")


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool
    duration_ms: int
    # Files the tool returned beside its text (a `ToolReply`'s), for the tool files store;
    # `notes`: what the model should read about files that were not kept.
    files: tuple[ToolFile, ...] = ()
    notes: tuple[str, ...] = ()


def _as_text(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > MAX_RESULT_CHARS:
        cut = len(text) - MAX_RESULT_CHARS
        text = text[:MAX_RESULT_CHARS] + f"\n[… {cut:,} characters of tool output cut …]"
    return text


def _run_in_thread(tool: Tool, context: TurnContext, arguments: dict):
    try:
        return tool.handler(context, arguments)
    finally:
        # The worker thread has its own database connection: never leak it.
        close_old_connections()
        connections.close_all()


@dataclass(frozen=True)
class PreparedCall:
    """A call whose tool exists and whose arguments passed the tool's schema."""

    tool: Tool
    arguments: dict
    started: float


def _timed(started: float, content, *, is_error: bool) -> ToolResult:
    return ToolResult(_as_text(content), is_error, int((time.monotonic() - started) * 1000))


def prepare_tool_call(
    tools: dict[str, Tool], name: str, raw_arguments: str, context: TurnContext
) -> PreparedCall | ToolResult:
    """Find the tool and check the arguments: a PreparedCall, or the error result the model
    reads (an unknown tool, invalid JSON, arguments that break the schema); never raises."""
    started = time.monotonic()

    def result(content: str, *, is_error: bool) -> ToolResult:
        return _timed(started, content, is_error=is_error)

    tool = tools.get(name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        return result(
            f"Error: there is no tool named {name!r}. Available: {available}.", is_error=True
        )

    def refused(arguments, message: str) -> ToolResult:
        if tool.on_refused is not None:
            try:
                tool.on_refused(context, arguments, message)
            except Exception:  # noqa: BLE001 - the refusal stands; its audit is best effort
                logger.warning("tool %s: recording a refusal failed", name, exc_info=True)
        return result(message, is_error=True)

    try:
        arguments = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        return refused(None, f"Error: the arguments are not valid JSON ({exc.msg}).")
    if not isinstance(arguments, dict):
        return refused(arguments, "Error: the arguments must be a JSON object.")
    try:
        _validate(arguments, tool.parameters)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(part) for part in exc.absolute_path) or "arguments"
        return refused(arguments, f"Error: invalid arguments ({where}: {exc.message}).")
    except jsonschema.SchemaError:
        return refused(arguments, f"Error: the tool {name} has an invalid schema; do not use it.")
    return PreparedCall(tool, arguments, started)


def run_prepared_call(
    prepared: PreparedCall, context: TurnContext, *, note=None, noted: bool = False
) -> ToolResult:
    """Run a prepared call with its timeout and describe the outcome; never raises. With
    `noted`, `on_finished` also gets the gate's `note`."""
    tool, arguments, name = prepared.tool, prepared.arguments, prepared.tool.name

    def result(content, *, is_error: bool) -> ToolResult:
        return _timed(prepared.started, content, is_error=is_error)

    def finished(outcome, answer: ToolResult) -> ToolResult:
        if tool.on_finished is not None:
            try:
                if noted:
                    tool.on_finished(context, arguments, outcome, note=note)
                else:
                    tool.on_finished(context, arguments, outcome)
            except Exception:  # noqa: BLE001 - the answer stands; its audit is best effort
                logger.warning("tool %s: recording the outcome failed", name, exc_info=True)
        return answer

    timeout = tool.timeout_seconds or settings.AGENT_TOOL_TIMEOUT_SECONDS
    future = _executor.submit(_run_in_thread, tool, context, arguments)
    try:
        value = future.result(timeout=timeout)
    except FutureTimeout:
        future.cancel()
        message = f"Error: the tool {name} did not finish within {timeout:g} s."
        return finished(TimeoutError(message), result(message, is_error=True))
    except ToolError as exc:
        return finished(exc, result(f"Error: {exc}", is_error=True))
    except Exception as exc:  # noqa: BLE001 - the model sees the failure, the turn goes on
        logger.info("tool %s raised", name, exc_info=True)
        message = f"Error: the tool {name} failed: {type(exc).__name__}: {exc}"
        return finished(exc, result(message, is_error=True))
    answer = result(value, is_error=False)
    files, notes = (
        tuple(getattr(value, "files", ()) or ()),
        tuple(getattr(value, "notes", ()) or ()),
    )
    if files or notes:
        answer = ToolResult(answer.content, False, answer.duration_ms, files, notes)
    return finished(value, answer)


def execute_tool_call(
    tools: dict[str, Tool], name: str, raw_arguments: str, context: TurnContext, call_id: str = ""
) -> ToolResult:
    """Run one tool call and describe the outcome for the model; never raises. A call whose
    gate wants a person's decision is refused here: only the turn loop can wait for one."""
    span = tracing.tool_span(name=name, call_id=call_id, tool=tools.get(name))
    result = _execute_tool_call(tools, name, raw_arguments, context, call_id)
    outcome = "error" if result.is_error else "ok"
    tracing.tool_span_end(span, outcome=outcome, duration_ms=result.duration_ms)
    return result


def _execute_tool_call(
    tools: dict[str, Tool], name: str, raw_arguments: str, context: TurnContext, call_id: str
) -> ToolResult:
    prepared = prepare_tool_call(tools, name, raw_arguments, context)
    if isinstance(prepared, ToolResult):
        return prepared
    gate = ask_gate(prepared, context, call_id)
    if gate is None:
        return run_prepared_call(prepared, context)
    if gate.outcome == Gate.RUN:
        return run_prepared_call(prepared, context, note=gate.note, noted=True)
    if gate.outcome == Gate.REFUSE:
        return _timed(prepared.started, gate.message, is_error=True)
    return _timed(
        prepared.started,
        f"Error: the tool {name} needs a person's decision, which cannot be asked here.",
        is_error=True,
    )


def ask_gate(prepared: PreparedCall, context: TurnContext, call_id: str) -> Gate | None:
    """The tool's gate on this call (None: it has none). A gate that breaks refuses."""
    if prepared.tool.gate is None:
        return None
    try:
        return prepared.tool.gate(context, call_id, prepared.arguments)
    except Exception:  # noqa: BLE001 - a broken gate must not let a call through
        logger.exception("tool %s: its gate failed", prepared.tool.name)
        return Gate(
            Gate.REFUSE, message=f"Error: the tool {prepared.tool.name} could not be checked."
        )
