"""OpenTelemetry traces, off unless TRACES_ENABLED is on (docs/OPERATIONS.md#traces).

The code that makes spans (the request middleware, `chats.agent.tracing`) uses only the
OpenTelemetry API, a no-op until a tracer provider is installed. This module installs the
SDK's provider, once per process, in each kind of process that makes spans:

- web: `hermes_site.asgi` (daphne) calls `tracing_configure(process="web")`;
- Celery: on `worker_process_init`, in each pool process after the fork (prefork) or in
  the worker itself (solo), never in a prefork parent, whose exporter thread would not
  survive the fork;
- the terminal (`manage.py chat` runs turns in its own process): on `chats.signals.
  turns_in_process`.

With traces on, a task published inside a span carries its context in the message's
headers (W3C `traceparent`), and the task runs in it: a turn enqueued by a request is a
child of that request's span, in the same trace.
"""

import logging
import os
import socket

from celery.signals import before_task_publish, task_postrun, task_prerun
from django.conf import settings
from opentelemetry import context, propagate, trace
from opentelemetry.propagators.textmap import Getter

logger = logging.getLogger(__name__)

_configured_pid: int | None = None
_provider = None


def tracing_configure(*, process: str) -> bool:
    """Install the SDK's tracer provider and its exporter in this process when TRACES_ENABLED
    is on (idempotent per process); False, touching nothing, when off."""
    global _configured_pid, _provider
    if not settings.TRACES_ENABLED:
        return False
    if _configured_pid == os.getpid():
        return True
    # The SDK is imported only when traces are on: nothing of it loads otherwise.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create(
        {"hermes.process": process, "host.name": socket.gethostname(), "process.pid": os.getpid()}
    )
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        # Neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES named one.
        resource = resource.merge(Resource({SERVICE_NAME: settings.OTEL_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER
    processor = _span_processor()
    if processor is not None:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _provider, _configured_pid = provider, os.getpid()
    before_task_publish.connect(inject_task_context, dispatch_uid="operations-trace-publish")
    task_prerun.connect(attach_task_context, dispatch_uid="operations-trace-prerun")
    task_postrun.connect(detach_task_context, dispatch_uid="operations-trace-postrun")
    logger.info(
        "traces on (%s): exporter %s, service %s",
        process,
        settings.OTEL_TRACES_EXPORTER,
        resource.attributes.get(SERVICE_NAME),
    )
    return True


def _span_processor():
    """The batching processor of the exporter OTEL_TRACES_EXPORTER names (None: `none`)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if settings.OTEL_TRACES_EXPORTER == "none":
        return None
    if settings.OTEL_TRACES_EXPORTER == "console":
        return BatchSpanProcessor(ConsoleSpanExporter())
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # Endpoint, headers, timeout, compression and certificates: OTEL_EXPORTER_OTLP_*.
    return BatchSpanProcessor(OTLPSpanExporter())


def tracing_flush(timeout_millis: int = 5000) -> None:
    """Export the spans still batched in this process (before it ends)."""
    if _provider is not None and _configured_pid == os.getpid():
        _provider.force_flush(timeout_millis)


# --- Celery: configuration per process, context through the task headers -------------------


def on_worker_process_init(sender=None, **kwargs) -> None:
    """Celery's worker_process_init: each pool process (or a solo worker) configures its own."""
    tracing_configure(process="worker")


def on_worker_process_shutdown(sender=None, **kwargs) -> None:
    """Celery's worker_process_shutdown: a pool process may end without running atexit."""
    tracing_flush()


def on_turns_in_process(sender=None, kind: str = "cli", **kwargs) -> None:
    """`chats.signals.turns_in_process`: a process that runs turns itself (the terminal)."""
    tracing_configure(process=kind)


def inject_task_context(sender=None, headers=None, **kwargs) -> None:
    """before_task_publish: the current span's context goes into the message's headers."""
    if headers is not None:
        propagate.inject(headers)


class _RequestGetter(Getter):
    """Reads a propagated field from a Celery task's request, where the message's headers
    land as attributes."""

    def get(self, carrier, key: str) -> list[str] | None:
        value = getattr(carrier, key, None)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier) -> list[str]:
        return []


_GETTER = _RequestGetter()
_attached: dict[str, object] = {}


def attach_task_context(sender=None, task_id=None, task=None, **kwargs) -> None:
    """task_prerun: run the task in the context its headers carry (nothing when none)."""
    request = getattr(task, "request", None)
    if request is None or task_id is None:
        return
    extracted = propagate.extract(request, getter=_GETTER)
    if trace.get_current_span(extracted).get_span_context().is_valid:
        _attached[task_id] = context.attach(extracted)


def detach_task_context(sender=None, task_id=None, **kwargs) -> None:
    """task_postrun: leave the context attached at prerun."""
    token = _attached.pop(task_id, None)
    if token is not None:
        context.detach(token)
