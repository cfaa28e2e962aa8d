"""The operations app listens to the engine, the chat sockets, the Telegram bridge and the
Celery worker; none of them imports this app. Receivers only move in-process counters
(cheap, no database), except the worker's heartbeat and the set-up of traces."""

from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from bots.signals import update_processed
from chats.signals import (
    model_error,
    socket_closed,
    socket_opened,
    tool_call_finished,
    turn_finished,
    turns_in_process,
)
from operations import metrics, tracing, worker


def on_turn_finished(sender, turn, status, **kwargs) -> None:
    metrics.TURNS_FINISHED.labels(status=status).inc()
    if turn.latency_ms is not None:
        metrics.TURN_LATENCY.observe(turn.latency_ms / 1000)
    if turn.first_delta_ms is not None:
        metrics.TURN_FIRST_TOKEN.observe(turn.first_delta_ms / 1000)


def on_model_error(sender, error, **kwargs) -> None:
    metrics.MODEL_ERRORS.labels(kind=getattr(error, "kind", "other")).inc()


def on_tool_call_finished(sender, ok, duration_ms, **kwargs) -> None:
    metrics.TOOL_CALLS.labels(outcome="ok" if ok else "error").inc()
    metrics.TOOL_CALL_SECONDS.observe((duration_ms or 0) / 1000)


def on_socket_opened(sender, **kwargs) -> None:
    metrics.WEBSOCKETS_OPEN.inc()
    metrics.WEBSOCKETS_OPENED.inc()


def on_socket_closed(sender, **kwargs) -> None:
    metrics.WEBSOCKETS_OPEN.dec()


def on_update_processed(sender, kind, duplicate, **kwargs) -> None:
    metrics.TELEGRAM_UPDATES.labels(kind=kind, duplicate="yes" if duplicate else "no").inc()


def connect() -> None:
    turn_finished.connect(on_turn_finished, dispatch_uid="operations-turn-finished")
    model_error.connect(on_model_error, dispatch_uid="operations-model-error")
    tool_call_finished.connect(on_tool_call_finished, dispatch_uid="operations-tool-call")
    socket_opened.connect(on_socket_opened, dispatch_uid="operations-socket-opened")
    socket_closed.connect(on_socket_closed, dispatch_uid="operations-socket-closed")
    update_processed.connect(on_update_processed, dispatch_uid="operations-telegram-update")
    worker_ready.connect(worker.on_worker_ready, dispatch_uid="operations-worker-ready")
    worker_shutdown.connect(worker.on_worker_shutdown, dispatch_uid="operations-worker-shutdown")
    # Traces (off unless TRACES_ENABLED): each process that makes spans configures its own.
    worker_process_init.connect(
        tracing.on_worker_process_init, dispatch_uid="operations-trace-process-init"
    )
    worker_process_shutdown.connect(
        tracing.on_worker_process_shutdown, dispatch_uid="operations-trace-process-shutdown"
    )
    turns_in_process.connect(tracing.on_turns_in_process, dispatch_uid="operations-trace-cli")
