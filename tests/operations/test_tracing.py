"""Traces (OpenTelemetry): the request span, the turn span with its model and tool calls,
the context carried through a Celery task's headers, and off by default.

An SDK tracer provider with an in-memory exporter is installed once in the test process
(the API allows one global provider per process); what the hub configures itself is checked
in fresh processes (`python -c`, `manage.py chat`)."""

import json
import os
import subprocess
import sys

import pytest
from asgiref.sync import async_to_sync
from celery.app.task import Context
from django.test import AsyncClient, Client
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from chats.agent.registry import Tool, register_tool_provider, registry
from chats.agent.turns import message_received
from chats.models import ChatMember, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from operations import tracing
from tests.fakes import openai_server as fake_openai
from tests.live import BASE_DIR, database_url_for_subprocesses
from tests.turns import run

# A word that appears in the person's message, the model's tool arguments and reply, and a
# tool's result: it must appear in no span.
MARKER = "zqxmarker7731"


class _Recording(SimpleSpanProcessor):
    """Exports finished spans only while a test of this module runs (pytest-django runs the
    transactional tests last, so this module's tests are not contiguous)."""

    active = False

    def on_end(self, span) -> None:
        if self.active:
            super().on_end(span)


_installed: tuple[InMemorySpanExporter, _Recording] | None = None


def _install() -> tuple[InMemorySpanExporter, _Recording]:
    """The SDK provider, installed once: the API allows one global provider per process."""
    global _installed
    if _installed is None:
        memory = InMemorySpanExporter()
        recording = _Recording(memory)
        provider = TracerProvider()
        provider.add_span_processor(recording)
        trace.set_tracer_provider(provider)
        assert trace.get_tracer_provider() is provider, "another test installed a provider"
        _installed = memory, recording
    return _installed


@pytest.fixture
def spans():
    memory, recording = _install()
    memory.clear()
    recording.active = True
    yield memory
    recording.active = False
    memory.clear()


def texts_of(span) -> list[str]:
    """Every text a finished span carries: name, attributes, events, status, resource."""
    texts = [span.name, span.status.description or ""]
    mappings = [span.attributes, span.resource.attributes]
    mappings += [event.attributes for event in span.events]
    for mapping in mappings:
        for key, value in (mapping or {}).items():
            texts += [str(key), json.dumps(value) if not isinstance(value, str) else value]
    texts += [event.name for event in span.events]
    return texts


def named(finished, prefix: str) -> list:
    return [span for span in finished if span.name.startswith(prefix)]


# --- the request ------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_request_makes_one_server_span_with_its_route_and_status_but_no_path_or_query(
    spans, api_for, owner
):
    chat, _ = chat_get_or_create(channel="api", chat_id=f"ops-{MARKER}", title="Ops")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    api = api_for(owner)
    response = api.get(f"/api/v1/chats/{chat.chat_key}/messages", {"q": MARKER})
    assert response.status_code == 200
    (span,) = spans.get_finished_spans()
    assert span.kind == SpanKind.SERVER
    assert span.name == "GET /api/v1/chats/<path:chat_key>/messages"
    assert span.attributes["http.request.method"] == "GET"
    assert span.attributes["http.route"] == "/api/v1/chats/<path:chat_key>/messages"
    assert span.attributes["http.response.status_code"] == 200
    # Neither the chat key in the path, the query string nor the bearer token.
    texts = " ".join(texts_of(span))
    assert MARKER not in texts and api.raw_token not in texts and "Bearer" not in texts


@pytest.mark.django_db
def test_an_unknown_path_and_an_odd_method_stay_low_cardinality(spans):
    Client().generic("BREW", f"/no/such/{MARKER}/")
    (span,) = spans.get_finished_spans()
    assert span.name == "_OTHER"
    assert span.attributes["http.request.method"] == "_OTHER"
    assert span.attributes["http.response.status_code"] == 404
    assert MARKER not in " ".join(texts_of(span))


@pytest.mark.django_db(transaction=True)
def test_the_async_path_makes_the_same_span_and_probes_make_none(spans):
    async def requests():
        page = await AsyncClient().get("/accounts/login/")
        probe = await AsyncClient().get("/healthz")  # answered before tracing
        return page.status_code, probe.status_code

    assert async_to_sync(requests)() == (200, 200)
    (span,) = spans.get_finished_spans()
    assert span.name == "GET /accounts/login/"
    assert span.attributes["http.response.status_code"] == 200


@pytest.mark.django_db
def test_a_request_continues_the_trace_its_client_sent(spans):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    Client().get("/accounts/login/", headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    (span,) = spans.get_finished_spans()
    assert format(span.context.trace_id, "032x") == trace_id
    assert format(span.parent.span_id, "016x") == "00f067aa0ba902b7"


@pytest.mark.django_db(transaction=True)
def test_a_websocket_connect_is_a_span_with_its_outcome_never_the_chat_key(
    spans, member, outsider, team_chat
):
    from tests.chats.test_consumers import close_code, session_headers, socket

    members, outsiders = session_headers(member), session_headers(outsider)

    async def body():
        accepted = socket(team_chat.chat_key, members, after=0)
        connected, _ = await accepted.connect(timeout=3)
        await accepted.disconnect()
        refused = await close_code(socket(team_chat.chat_key, outsiders))
        return connected, refused

    assert async_to_sync(body)() == (True, 4404)
    sockets = named(spans.get_finished_spans(), "WS ")
    assert [span.attributes["hermes.websocket.outcome"] for span in sockets] == [
        "accepted",
        "not_found",
    ]
    for span in sockets:
        assert span.name == "WS /ws/chats/<path:chat_key>/" and span.kind == SpanKind.SERVER
        assert "team-room" not in " ".join(texts_of(span))  # the chat key's id


# --- the turn ---------------------------------------------------------------------------


def ask(text: str):
    result = message_ingest(
        channel="api", chat_id="traced", user_id="u1", user_name="Ada", text=text
    )
    return message_received(result, enqueue=False)


@pytest.mark.django_db(transaction=True)
def test_a_turn_makes_a_span_with_model_and_tool_calls_as_children_and_no_text(spans, fake_llm):
    fake_llm.script(
        fake_openai.tool_calls(
            [
                ("call_search", "session_search", {"query": MARKER}),
                ("call_time", "current_time", {"timezone": f"Mars/{MARKER}"}),
            ]
        ),
        fake_openai.text(f"Found it: {MARKER}."),
    )
    message_ingest(
        channel="api", chat_id="traced", user_id="u1", text=f"The runbook says {MARKER}."
    )
    turn = run(ask(f"Where did we write {MARKER}?"))
    finished = spans.get_finished_spans()

    (turn_span,) = named(finished, "turn")
    assert turn_span.attributes["hermes.turn.id"] == turn.pk
    assert turn_span.attributes["hermes.chat.id"] == turn.chat_id
    assert turn_span.attributes["hermes.chat.channel"] == "api"
    assert turn_span.attributes["hermes.turn.outcome"] == "completed"
    assert turn_span.attributes["hermes.turn.iterations"] == 2
    assert turn_span.status.status_code != StatusCode.ERROR

    models = named(finished, "chat ")
    assert len(models) == 2
    for span in models:
        assert span.parent.span_id == turn_span.context.span_id
        assert span.kind == SpanKind.CLIENT
        assert span.attributes["gen_ai.request.model"] == fake_llm.model
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
        assert span.attributes["gen_ai.usage.output_tokens"] > 0
        assert span.attributes["hermes.model.first_token_ms"] >= 0
        assert [event.name for event in span.events] == ["first_token"]
    assert [span.attributes["gen_ai.response.finish_reasons"] for span in models] == [
        ("tool_calls",),
        ("stop",),
    ]
    assert sum(span.attributes["gen_ai.usage.input_tokens"] for span in models) == (
        turn.prompt_tokens
    )

    tools = {span.attributes["gen_ai.tool.name"]: span for span in named(finished, "execute_tool")}
    assert set(tools) == {"session_search", "current_time"}
    for span in tools.values():
        assert span.parent.span_id == turn_span.context.span_id
        assert span.attributes["hermes.tool.server"] == "hub"
        assert span.attributes["hermes.tool.duration_ms"] >= 0
    assert tools["session_search"].attributes["hermes.tool.outcome"] == "ok"
    assert tools["current_time"].attributes["hermes.tool.outcome"] == "error"
    assert tools["current_time"].status.status_code == StatusCode.ERROR

    # The message, the tool arguments, the tool result (the search found the message) and
    # the reply all held the marker: no span does.
    assert MARKER in fake_llm.requests[1]["messages"][-2]["content"]  # the search's result
    for span in finished:
        assert not [text for text in texts_of(span) if MARKER in text], span.name


class _ServedTools:
    """A tool as a tool server's provider registers it: named after its server."""

    def tools(self):
        def lookup(context, arguments):
            return {"found": arguments["key"]}

        schema = {"type": "object", "properties": {"key": {"type": "string"}}}
        return [Tool("files__lookup", "Look a key up.", schema, lookup, server="files")]


@pytest.mark.django_db(transaction=True)
def test_a_tool_servers_tool_is_traced_with_its_server(spans, fake_llm):
    provider = _ServedTools()
    register_tool_provider(provider)
    try:
        fake_llm.script(
            fake_openai.tool_calls([("c1", "files__lookup", {"key": MARKER})]),
            fake_openai.text("done"),
        )
        run(ask("look it up"))
    finally:
        registry.tool_providers.remove(provider)
    (span,) = named(spans.get_finished_spans(), "execute_tool")
    assert span.attributes["hermes.tool.server"] == "files"
    assert span.attributes["gen_ai.tool.name"] == "files__lookup"
    assert span.attributes["hermes.tool.outcome"] == "ok"
    assert MARKER not in " ".join(texts_of(span))


@pytest.mark.django_db(transaction=True)
def test_a_failed_model_call_is_an_error_span_of_its_kind_and_fails_the_turn_span(
    spans, fake_llm, settings
):
    settings.LLM_MAX_RETRIES = 0
    fake_llm.script(fake_openai.error(503))
    turn = ask(f"hello {MARKER}")
    from chats.agent.llm import get_provider
    from chats.agent.loop import run_claimed_turn
    from chats.agent.turns import turn_claim

    done = run_claimed_turn(turn_claim(turn_id=turn.pk, worker="t").turn, provider=get_provider())
    assert done.status == Turn.Status.FAILED
    finished = spans.get_finished_spans()
    (model,) = named(finished, "chat ")
    assert model.attributes["error.type"] == "server"
    assert model.status.status_code == StatusCode.ERROR
    (turn_span,) = named(finished, "turn")
    assert turn_span.attributes["hermes.turn.outcome"] == "failed"
    assert turn_span.attributes["error.type"] == "server"
    for span in finished:
        assert not [text for text in texts_of(span) if MARKER in text], span.name


@pytest.mark.django_db(transaction=True)
def test_a_background_review_is_a_span_with_its_model_calls(spans, fake_llm, settings, monkeypatch):
    from learning import tasks
    from learning.models import Review
    from tests.learning.helpers import chat_turn

    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 1
    queued = []
    monkeypatch.setattr(tasks.run_review, "delay", queued.append)
    chat_turn(fake_llm, f"I prefer {MARKER} for deploys")
    fake_llm.script(fake_openai.text("Nothing to save."))
    spans.clear()
    tasks.run_review(queued[-1])
    review = Review.objects.get(pk=queued[-1])
    finished = spans.get_finished_spans()
    (span,) = named(finished, "review")
    assert span.attributes["hermes.review.id"] == review.pk
    assert span.attributes["hermes.review.outcome"] == "done"
    (model,) = named(finished, "chat ")
    assert model.parent.span_id == span.context.span_id
    assert model.attributes["hermes.model.purpose"] == "review"
    assert model.attributes["gen_ai.usage.input_tokens"] == review.prompt_tokens
    for each in finished:
        assert not [text for text in texts_of(each) if MARKER in text], each.name


@pytest.mark.django_db(transaction=True)
def test_a_task_published_in_a_span_runs_its_turn_in_that_trace(spans, fake_llm):
    """What the Celery signals do around a real task: the publisher's context goes into the
    message headers, and the worker's request (celery's Context, where headers land as
    attributes) brings it back for the task's run."""
    fake_llm.script(fake_openai.text("ok"))
    turn = ask("hi")
    headers = {}
    with trace.get_tracer("test").start_as_current_span("POST /api/v1/messages") as request:
        tracing.inject_task_context(headers=headers)
    assert headers["traceparent"].split("-")[2] == format(request.context.span_id, "016x")

    task = type("Task", (), {"request": Context({"id": "t-1", **headers})})()
    tracing.attach_task_context(task_id="t-1", task=task)
    try:
        run(turn)
    finally:
        tracing.detach_task_context(task_id="t-1")
    assert not trace.get_current_span().get_span_context().is_valid  # detached

    (turn_span,) = named(spans.get_finished_spans(), "turn")
    assert turn_span.context.trace_id == request.context.trace_id
    assert turn_span.parent.span_id == request.context.span_id


def test_a_task_without_trace_headers_runs_in_no_trace(spans):
    task = type("Task", (), {"request": Context({"id": "t-2"})})()
    tracing.attach_task_context(task_id="t-2", task=task)
    assert "t-2" not in tracing._attached
    tracing.detach_task_context(task_id="t-2")


# --- configuration, in fresh processes ------------------------------------------------------

PROBE = """
import os, sys
import django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")
django.setup()
import hermes_site.asgi  # what daphne loads
from opentelemetry import trace
provider = trace.get_tracer_provider()
from django.core.exceptions import MiddlewareNotUsed
from operations.middleware import RequestTracingMiddleware
try:
    RequestTracingMiddleware(lambda request: None)
    chain = "traced"
except MiddlewareNotUsed:
    chain = "untraced"
sdk = "opentelemetry.sdk.trace" in sys.modules
print(type(provider).__module__, type(provider).__name__, sdk, chain)
if hasattr(provider, "resource"):
    attributes = provider.resource.attributes
    print(attributes["service.name"], attributes["hermes.process"])
"""


def probe(**env) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACES_"))}
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=BASE_DIR,
        env={**clean, "SECRET_KEY": "t", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_traces_are_off_by_default_the_tracing_sdk_is_not_even_imported():
    # (redis-py imports the SDK's metrics package when it is installed; not its tracing.)
    # ... and the request middleware leaves the chain.
    assert probe() == ["opentelemetry.trace", "ProxyTracerProvider", "False", "untraced"]


def test_traces_enabled_installs_the_sdk_provider_in_the_web_process():
    assert probe(TRACES_ENABLED="true", OTEL_TRACES_EXPORTER="none") == [
        "opentelemetry.sdk.trace",
        "TracerProvider",
        "True",
        "traced",
        "hermes-hub",
        "web",
    ]
    named = probe(TRACES_ENABLED="1", OTEL_SERVICE_NAME="hub-eu", OTEL_TRACES_EXPORTER="none")
    assert named[4] == "hub-eu"


def test_an_exporter_protocol_that_is_not_installed_refuses_to_start():
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACES_"))}
    env = {**clean, "SECRET_KEY": "t", "TRACES_ENABLED": "1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=BASE_DIR, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "only http/protobuf is supported, got 'grpc'" in result.stderr


@pytest.mark.django_db(transaction=True)
def test_the_terminal_configures_its_own_traces_and_its_turn_is_exported(fake_llm):
    fake_llm.script(fake_openai.text("Hello from the model."))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACES_"))}
    result = subprocess.run(
        [sys.executable, "manage.py", "chat", "-m", f"hi {MARKER}"],
        cwd=BASE_DIR,
        env={
            **clean,
            "DATABASE_URL": database_url_for_subprocesses(),
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": fake_llm.base_url,
            "LLM_MODEL": fake_llm.model,
            "TRACES_ENABLED": "on",
            "OTEL_TRACES_EXPORTER": "console",  # JSON of each span on stdout at exit
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Hello from the model." in result.stdout
    assert '"name": "turn"' in result.stdout and '"hermes.process": "cli"' in result.stdout
    assert '"gen_ai.usage.output_tokens"' in result.stdout
    spans_text = result.stdout.split("Hello from the model.", 1)[1]
    assert MARKER not in spans_text
