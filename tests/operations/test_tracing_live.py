"""Traces for real: daphne and a prefork Celery worker with TRACES_ENABLED, exporting with
the real OTLP/HTTP exporter to a receiver on loopback that decodes the protobuf. The turn the
request enqueued runs in the request's trace, in another process."""

import os

import pytest

from tests.agent.test_end_to_end import post, room, wait_for_turn  # noqa: F401 - a fixture
from tests.fakes import openai_server as fake_openai
from tests.fakes.otlp_collector import OTLPCollector

pytestmark = [pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]

MARKER = "zqxlive5120"
SERVER, CLIENT = 2, 3  # the protobuf's SpanKind values


@pytest.fixture
def collector():
    with OTLPCollector() as receiver:
        yield receiver


@pytest.fixture
def stack(transactional_db, fake_llm, settings, collector):
    from django.conf import global_settings

    from tests.live import LiveStack

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    live = LiveStack(
        llm_base_url=fake_llm.base_url,
        worker_name=f"traces-{os.getpid()}@%h",
        extra_env={
            "TRACES_ENABLED": "true",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_SERVICE_NAME": "hermes-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s instead of 5 s
        },
    )
    try:
        live.start_web()
        live.start_worker(pool="prefork", concurrency=1)
        yield live
    finally:
        live.stop()


def test_a_request_and_the_turn_it_enqueued_reach_the_collector_in_one_trace(
    stack,
    fake_llm,
    collector,
    room,  # noqa: F811 - the fixture imported above
):
    chat, token = room
    fake_llm.script(
        fake_openai.tool_calls([("call_1", "current_time", {"timezone": "Europe/Berlin"})]),
        fake_openai.text(f"It is late, {MARKER}."),
    )
    status, body = post(
        stack,
        token,
        {"chat_id": "ops", "user_id": "u1", "message_id": "m-1", "text": f"Time? {MARKER}"},
    )
    assert status == 201
    turn = wait_for_turn(body["turn"]["id"], {"completed", "failed"})
    assert turn.status == "completed", turn.error

    spans = collector.wait_for(
        lambda got: (
            any(s.name == "turn" for s in got)
            and any(s.name == "POST /api/v1/messages" for s in got)
        )
    )
    (request,) = [s for s in spans if s.name == "POST /api/v1/messages"]
    (turn_span,) = [s for s in spans if s.name == "turn"]
    assert request.kind == SERVER and request.attributes["http.response.status_code"] == 201
    assert request.resource["hermes.process"] == "web"
    assert request.resource["service.name"] == "hermes-test"
    # Another process (a prefork pool process), the same trace, under the request's span.
    assert turn_span.resource["hermes.process"] == "worker"
    assert turn_span.resource["process.pid"] != request.resource["process.pid"]
    assert turn_span.trace_id == request.trace_id
    assert turn_span.parent_span_id == request.span_id
    assert turn_span.attributes["hermes.turn.id"] == turn.pk
    assert turn_span.attributes["hermes.turn.outcome"] == "completed"

    models = [s for s in spans if s.name.startswith("chat ")]
    assert len(models) == 2 and {s.parent_span_id for s in models} == {turn_span.span_id}
    assert all(s.kind == CLIENT for s in models)
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in models) == turn.prompt_tokens
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in models) == (
        turn.completion_tokens
    )
    assert all(("first_token", {}) in s.events for s in models)
    (tool,) = [s for s in spans if s.name == "execute_tool current_time"]
    assert tool.parent_span_id == turn_span.span_id
    assert tool.attributes["hermes.tool.outcome"] == "ok"
    assert tool.attributes["hermes.tool.server"] == "hub"

    assert collector.content_types[0] == "application/x-protobuf"
    for span in spans:
        assert not [text for text in span.strings() if MARKER in text], span.name
        assert token not in " ".join(span.strings())
