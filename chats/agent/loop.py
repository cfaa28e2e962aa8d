"""The turn loop: build the context, call the model, run tools, persist and publish each step.

Runs one claimed turn to its end: `completed`, `failed` (the model failed for good; the
user's message is kept and the error is visible) or `interrupted` (a newer message or a
Stop; the partial reply is stored marked interrupted). Never leaves a turn `running`.

While it runs, a heartbeat thread keeps its lease alive. A turn that lost its lease (another
process recovered it as stale) stops at its next check, publishes nothing more and stores
nothing more: its unsent reply is discarded (see `chats.agent.turns`).
"""

import logging
import time
from collections.abc import Callable

from django.conf import settings

from chats.agent import events, tracing
from chats.agent.carrying import tool_files_message
from chats.agent.compression import compress_history, needs_compression
from chats.agent.context import ContextBudget, build_context, enforce_window
from chats.agent.convert import tool_call_step
from chats.agent.interrupts import clear_interrupt, interrupt_reason
from chats.agent.lease import LeaseHeartbeat
from chats.agent.llm.base import ChatProvider, Finish, LLMError, TextDelta, ToolCall, Usage
from chats.agent.registry import Gate, TurnContext, TurnSpend, registry
from chats.agent.tools import ToolResult, ask_gate, prepare_tool_call, run_prepared_call
from chats.agent.turns import (
    LeaseLost,
    turn_announce_finished,
    turn_append,
    turn_finish,
    turn_wait,
    turn_wake_next,
)
from chats.models import Message, Turn
from chats.payloads import message_payload
from chats.signals import model_error, tool_call_finished

logger = logging.getLogger(__name__)

INTERRUPT_POLL_SECONDS = 0.05
EventSink = Callable[[dict], None]


class _Stopped(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Refused(Exception):
    """A turn gate (e.g. a used-up budget) ends the turn with `answer` as its reply."""

    def __init__(self, answer: str):
        super().__init__(answer)
        self.answer = answer


class _Waiting(Exception):
    """A tool call needs a person's decision: the turn lets go of its worker and waits."""

    def __init__(self, gate: Gate, call: ToolCall):
        super().__init__(gate.reason)
        self.gate = gate
        self.call = call


class TurnRunner:
    """Runs one claimed turn. `on_event` also receives every event (the in-process CLI)."""

    def __init__(self, turn: Turn, provider: ChatProvider, on_event: EventSink | None = None):
        self.turn = turn
        self.chat = turn.chat
        self.trigger = Message.objects.select_related("actor__person", "chat").get(
            pk=turn.trigger_id
        )
        self.provider = provider
        self.on_event = on_event
        actor = self.trigger.actor
        self.context = TurnContext(
            chat=self.chat,
            trigger=self.trigger,
            turn=turn,
            actor=actor,
            person=actor.person if actor else None,
        )
        self._partial_on_error = ""
        self._last_poll = 0.0
        self._started = time.monotonic()
        self._heartbeat = LeaseHeartbeat(turn.pk)
        self._lease_lost = False
        self._resumed = turn.iterations > 0  # it waited for a decision and goes on now
        self._error_kind = ""  # why it failed, for its trace span (LLMError.kind or internal)
        # The counters as stored when the run began: what is above them is not recorded yet.
        self._recorded = (turn.prompt_tokens, turn.completion_tokens)
        self._files_cap = 0  # set once the context is built (see `_run`)

    # --- events -----------------------------------------------------------------------

    def emit(self, event_type: str, **data) -> None:
        if self.lease_lost:
            return  # the turn is no longer ours: its recovery announced how it ended
        event = events.publish(self.chat.pk, event_type, turn_id=self.turn.pk, **data)
        if self.on_event is not None:
            self.on_event(event or {"type": event_type, "turn_id": self.turn.pk, **data})

    # --- interrupt and lease --------------------------------------------------------------

    @property
    def lease_lost(self) -> bool:
        return self._lease_lost or self._heartbeat.lost

    def should_stop(self) -> bool:
        if self.lease_lost:
            return True
        now = time.monotonic()
        if now - self._last_poll < INTERRUPT_POLL_SECONDS:
            return False
        self._last_poll = now
        return interrupt_reason(self.turn.pk) is not None

    def check_interrupt(self) -> None:
        reason = interrupt_reason(self.turn.pk)
        if reason is not None:
            raise _Stopped(reason)

    # --- the loop -------------------------------------------------------------------------

    def run(self) -> Turn:
        with tracing.turn_span(turn=self.turn, chat=self.chat, resumed=self._resumed) as span:
            self._heartbeat.start()
            try:
                return self._run()
            finally:
                self._heartbeat.stop()
                if self.lease_lost:
                    # Nothing was stored or published after the loss; what the database says
                    # (interrupted by the recovery) is the outcome.
                    clear_interrupt(self.turn.pk)
                    self.turn.refresh_from_db()
                tracing.turn_outcome(
                    span, turn=self.turn, lease_lost=self.lease_lost, error_kind=self._error_kind
                )

    def _run(self) -> Turn:
        info = self.provider.info
        self.turn.model, self.turn.provider = info.model, info.name
        self.emit(
            "turn.started",
            trigger_id=self.trigger.pk,
            model=info.model,
            provider=info.name,
            demo=info.is_demo,
            resumed=self.turn.iterations > 0,
        )
        partial = ""
        try:
            self._check_gates()  # before any model call, compression's included
            tools = registry.tools_for_turn(self.context) if info.supports_tools else []
            tool_map = {tool.name: tool for tool in tools}
            specs = [tool.spec() for tool in tools]
            self._compress_if_needed(info.context_tokens)
            self.check_interrupt()  # compression can take long: a Stop or a lost lease
            built = build_context(
                chat=self.chat,
                trigger=self.trigger,
                provider_info=info,
                tool_specs=specs,
                turn_context=self.context,
            )
            self.turn.prompt_report = built.report
            limit = ContextBudget.from_settings(info.context_tokens).input_limit
            # What one tool result's files may take in the next request (as much as the
            # current message may; the window guard runs before every call).
            self._files_cap = built.budget.current
            messages = built.messages
            done = self.turn.iterations  # > 0: a turn that waited continues where it stopped
            if done:
                messages += self._resume(tool_map)
            for iteration in range(done + 1, settings.AGENT_MAX_ITERATIONS + 1):
                if iteration > 1:
                    # Between the iterations of a tool loop, before the iteration counts
                    # (the iterations are the model calls the usage ledger records).
                    self._check_gates()
                self.turn.iterations = iteration
                if iteration > 1:
                    messages = enforce_window(messages, specs, limit)
                partial, calls, finish = self._call_model(messages, specs, built.max_reply_tokens)
                if finish == "cancelled":
                    raise _Stopped(interrupt_reason(self.turn.pk) or "stopped")
                if not calls:
                    return self._complete(partial)
                step_text, partial = partial, ""  # stored with the tool-call step
                messages += self._run_tools(step_text, calls, tool_map)
            return self._complete(
                f"I stopped after {settings.AGENT_MAX_ITERATIONS} steps without finishing "
                "(the step budget of one reply). Tell me to continue if you want me to go on.",
                budget_exhausted=True,
            )
        except LeaseLost:
            return self._abandon()
        except _Refused as refused:
            # Streamed like a model's reply (one delta), so every channel that shows the
            # deltas (the terminal, live views) shows it too; then stored as the reply.
            self.emit("turn.delta", text=refused.answer)
            return self._complete(refused.answer, refused=True)
        except _Waiting as wait:
            return self._wait(wait)
        except _Stopped as stop:
            return self._interrupted(partial, stop.reason)
        except LLMError as exc:
            logger.warning("turn %s failed: %s", self.turn.pk, exc)
            self._error_kind = exc.kind
            return self._failed(partial, exc.user_message)
        except Exception:
            logger.exception("turn %s crashed", self.turn.pk)
            self._error_kind = "internal"
            return self._failed(partial, "The agent hit an internal error; it has been logged.")

    def _check_gates(self) -> None:
        """Ask the turn gates (budgets) whether the turn may call the model now; they see the
        spend of this run not yet in the ledger. The person's message is stored already."""
        if not registry.turn_gates:
            return
        pending = TurnSpend(
            model=self.turn.model,
            prompt_tokens=max(0, self.turn.prompt_tokens - self._recorded[0]),
            completion_tokens=max(0, self.turn.completion_tokens - self._recorded[1]),
        )
        answer = registry.turn_refusal(self.context, pending)
        if answer:
            raise _Refused(answer)

    def _compress_if_needed(self, window: int) -> None:
        try:
            if needs_compression(self.chat, window):
                summary = compress_history(
                    chat=self.chat,
                    provider=self.provider,
                    window_tokens=window,
                    before_id=self.trigger.pk,
                    turn=self.turn,
                )
                if summary is not None:
                    self.emit("summary.created", message=message_payload(summary))
        except Exception:  # noqa: BLE001 - the turn runs on truncation alone; retried next turn
            logger.warning("compression failed in chat %s", self.chat.pk, exc_info=True)

    def _call_model(self, messages, specs, max_tokens) -> tuple[str, list[ToolCall], str]:
        text: list[str] = []
        calls: list[ToolCall] = []
        finish = "stop"
        batcher = events.DeltaBatcher(lambda chunk: self.emit("turn.delta", text=chunk))
        stream = tracing.model_stream(
            self.provider.stream(
                messages, tools=specs or None, max_tokens=max_tokens, should_stop=self.should_stop
            ),
            info=self.provider.info,
            purpose="turn",
            max_tokens=max_tokens,
        )
        try:
            for event in stream:
                if isinstance(event, TextDelta):
                    if self.turn.first_delta_ms is None:
                        self.turn.first_delta_ms = int((time.monotonic() - self._started) * 1000)
                    text.append(event.text)
                    batcher.add(event.text)
                elif isinstance(event, ToolCall):
                    calls.append(event)
                elif isinstance(event, Usage):
                    self.turn.prompt_tokens += event.prompt_tokens
                    self.turn.completion_tokens += event.completion_tokens
                elif isinstance(event, Finish):
                    finish = event.reason
        except LLMError as exc:
            batcher.flush()
            self._partial_on_error = "".join(text)
            model_error.send_robust(sender=Turn, turn=self.turn, error=exc)
            raise
        finally:
            batcher.flush()
        return "".join(text), calls, finish

    def _run_tools(self, text: str, calls: list[ToolCall], tool_map) -> list[dict]:
        """Persist the tool-call step and every result; the step is complete even when stopped
        (or, when a call waits for a decision, once the turn continues)."""
        parts = [
            {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
            for c in calls
        ]
        step = turn_append(
            turn=self.turn,
            role=Message.Role.ASSISTANT,
            text=text,
            parts=parts,
            metadata={"turn": self.turn.pk},
            reply_to=self.trigger,
        )
        sent = [tool_call_step(text, calls)]
        return sent + self._resolve_calls(step.pk, calls, tool_map)

    def _resolve_calls(
        self, step_id: int, calls: list[ToolCall], tool_map, earlier: list | None = None
    ) -> list[dict]:
        """Run (or refuse) each call in order, storing each result before announcing it;
        raises _Waiting at a call that needs a decision (the results before it are stored,
        the calls after it run when the turn continues) and _Stopped once all are stored
        when the turn was asked to stop. Files a call returned are kept on its result
        (the tool files store) and go to the model in one labelled user message after the
        step's last result (`earlier`: the step's results stored before the turn waited)."""
        sent = []
        stopped = None
        rows = list(earlier or [])
        notes: list[str] = []
        for call in calls:
            if stopped is None:
                stopped = interrupt_reason(self.turn.pk)
            if stopped is not None:
                content, is_error, duration = "Not run: the reply was interrupted.", True, 0
            else:
                result = self._traced_execute(step_id, call, tool_map)
                content, is_error, duration = result.content, result.is_error, result.duration_ms
            # Stored (only while the lease is held) before it is announced.
            row = turn_append(
                turn=self.turn,
                role=Message.Role.TOOL,
                text=content,
                metadata={
                    "turn": self.turn.pk,
                    "tool_call_id": call.id,
                    "tool_name": call.name,
                    "is_error": is_error,
                    "duration_ms": duration,
                },
            )
            rows.append(row)
            if stopped is None and (result.files or result.notes):
                kept = registry.tool_files_store(self.context, row, result.files)
                notes += [f"{call.name}: {note}" for note in (*result.notes, *kept)]
            if stopped is None:
                tool_call_finished.send_robust(
                    sender=Turn,
                    turn=self.turn,
                    name=call.name,
                    ok=not is_error,
                    duration_ms=duration,
                )
                self.emit(
                    "tool.finished",
                    call_id=call.id,
                    name=call.name,
                    ok=not is_error,
                    duration_ms=duration,
                    error=content[:300] if is_error else "",
                )
            sent.append({"role": "tool", "tool_call_id": call.id, "content": content})
        if stopped is not None:
            raise _Stopped(stopped)
        return sent + self._tool_files(rows, notes)

    def _tool_files(self, rows: list, notes: list[str] = ()) -> list[dict]:
        """The labelled user message with what a step's results carry (none: [])."""
        follow = tool_files_message(
            rows,
            cap=self._files_cap,
            provider_info=self.provider.info,
            turn_context=self.context,
            notes=notes,
        )
        return [follow] if follow is not None else []

    def _traced_execute(self, step_id: int, call: ToolCall, tool_map) -> ToolResult:
        """`_execute` inside the call's trace span (name, server, outcome, duration)."""
        span = tracing.tool_span(name=call.name, call_id=call.id, tool=tool_map.get(call.name))
        try:
            result = self._execute(step_id, call, tool_map)
        except _Waiting:
            tracing.tool_span_end(span, outcome="waiting")
            raise
        except BaseException as exc:
            tracing.tool_span_end(span, outcome=type(exc).__name__)
            raise
        outcome = "error" if result.is_error else "ok"
        tracing.tool_span_end(span, outcome=outcome, duration_ms=result.duration_ms)
        return result

    def _execute(self, step_id: int, call: ToolCall, tool_map) -> ToolResult:
        """One call: checked, asked of its gate (keyed by the step and the call's id, so a
        decision binds to exactly this call), then run."""
        prepared = prepare_tool_call(tool_map, call.name, call.arguments, self.context)
        if isinstance(prepared, ToolResult):
            self.emit("tool.started", call_id=call.id, name=call.name)
            return prepared
        gate = ask_gate(prepared, self.context, f"{step_id}/{call.id}")
        if gate is not None and gate.outcome == Gate.WAIT:
            raise _Waiting(gate, call)
        self.emit("tool.started", call_id=call.id, name=call.name)
        if gate is None:
            return run_prepared_call(prepared, self.context)
        if gate.outcome == Gate.REFUSE:
            return ToolResult(gate.message, True, 0)
        return run_prepared_call(prepared, self.context, note=gate.note, noted=True)

    def _resume(self, tool_map) -> list[dict]:
        """The steps this turn stored before it waited, as messages, and the results of the
        calls it had not resolved (the decided one first)."""
        rows = Message.objects.filter(
            chat=self.chat,
            id__gt=self.trigger.pk,
            role__in=(Message.Role.ASSISTANT, Message.Role.TOOL),
            metadata__turn=self.turn.pk,
        ).order_by("id")
        sent: list[dict] = []
        last_step, last_calls, answered, step_rows = None, [], set(), []
        for row in rows:
            if row.role == Message.Role.ASSISTANT:
                sent += self._tool_files(step_rows)  # the previous step's files
                last_step, answered, step_rows = row, set(), []
                last_calls = [
                    ToolCall(id=str(p["id"]), name=p["name"], arguments=p.get("arguments") or "")
                    for p in row.parts or []
                    if p.get("type") == "tool_call"
                ]
                sent.append(tool_call_step(row.text, last_calls))
            else:
                call_id = str(row.metadata.get("tool_call_id", ""))
                answered.add(call_id)
                sent.append({"role": "tool", "tool_call_id": call_id, "content": row.text})
                step_rows.append(row)
        pending = [call for call in last_calls if call.id not in answered]
        if last_step is not None and pending:
            sent += self._resolve_calls(last_step.pk, pending, tool_map, earlier=step_rows)
        else:
            sent += self._tool_files(step_rows)
        return sent

    # --- outcomes -------------------------------------------------------------------------

    def _finish(self, status: str, reply_text: str | None, **fields) -> bool:
        """The final write; False when the lease was lost (nothing stored, nothing to say)."""
        self._heartbeat.stop()  # no renewal may race the final write
        if self.lease_lost or not turn_finish(
            turn=self.turn, status=status, reply_text=reply_text, reply_to=self.trigger, **fields
        ):
            self._abandon()
            return False
        if self._resumed:
            turn_wake_next(self.chat.pk)  # turns parked behind this one while it waited
        return True

    def _complete(self, text: str, **flags) -> Turn:
        if self._finish(Turn.Status.COMPLETED, text, reply_flags=flags):
            reply = self.turn.reply
            self.emit("turn.finished", message=message_payload(reply), usage=self._usage())
            turn_announce_finished(self.turn, Turn.Status.COMPLETED)
        return self.turn

    def _interrupted(self, partial: str, reason: str) -> Turn:
        if self._finish(
            Turn.Status.INTERRUPTED,
            partial or None,
            reply_flags={"interrupted": True},
            interrupt_reason=reason,
        ):
            reply = self.turn.reply
            self.emit(
                "turn.interrupted",
                reason=reason,
                message=message_payload(reply) if reply else None,
            )
            turn_announce_finished(self.turn, Turn.Status.INTERRUPTED)
        return self.turn

    def _failed(self, partial: str, error: str) -> Turn:
        partial = partial or getattr(self, "_partial_on_error", "")
        if self._finish(
            Turn.Status.FAILED, partial or None, reply_flags={"failed": True}, error=error
        ):
            reply = self.turn.reply
            self.emit("turn.failed", error=error, message=message_payload(reply) if reply else None)
            turn_announce_finished(self.turn, Turn.Status.FAILED)
        return self.turn

    def _wait(self, wait: _Waiting) -> Turn:
        """Let go of the worker: the turn waits for a decision (see `turn_wait`)."""
        self._heartbeat.stop()  # no renewal may race the move to waiting
        if self.lease_lost or not turn_wait(
            turn=self.turn, reason=wait.gate.reason, hold=wait.gate.hold
        ):
            return self._abandon()
        if self.turn.status != Turn.Status.WAITING:
            return self.turn  # stopped as it went to wait: announced as interrupted
        self.emit(
            "turn.waiting",
            call_id=wait.call.id,
            name=wait.call.name,
            reason=wait.gate.reason,
            card=wait.gate.card or {},
        )
        return self.turn

    def _abandon(self) -> Turn:
        """The lease was lost: another process already marked the turn interrupted and
        announced it. Store and publish nothing; the unsent reply is discarded."""
        self._lease_lost = True
        logger.warning("turn %s lost its lease; its unsent work is discarded", self.turn.pk)
        return self.turn

    def _usage(self) -> dict:
        return {
            "prompt_tokens": self.turn.prompt_tokens,
            "completion_tokens": self.turn.completion_tokens,
            "iterations": self.turn.iterations,
        }


def run_claimed_turn(
    turn: Turn, *, provider: ChatProvider, on_event: EventSink | None = None
) -> Turn:
    """Run a turn that `turn_claim` moved to running, to its end."""
    return TurnRunner(turn, provider, on_event).run()
