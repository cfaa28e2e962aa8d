"""The fake OpenAI-compatible server speaks the real protocol: raw HTTP/SSE checks plus the
official SDK as a client."""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from chats.agent.tokens import count_tokens
from tests.fakes.openai_server import (
    FakeOpenAI,
    context_length_exceeded,
    drop,
    echo,
    error,
    filler_text,
    hang,
    text,
    text_then_error,
    tool_calls,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
USER_HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def sdk(fake, **kwargs):
    return openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0, **kwargs)


def post_raw(fake, body: dict) -> tuple[int, dict, bytes]:
    connection = http.client.HTTPConnection(fake.host, fake.port, timeout=5)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def sse_payloads(raw: bytes) -> list[str]:
    events = raw.decode().split("\n\n")
    assert events[-1] == ""
    assert all(event.startswith("data: ") for event in events[:-1])
    return [event.removeprefix("data: ") for event in events[:-1]]


def test_stream_is_openai_sse_with_a_usage_chunk_and_done(fake):
    fake.script(text("Hello there friend"))
    body = {"model": "m", "messages": USER_HI, "stream": True}

    status, headers, raw = post_raw(fake, body | {"stream_options": {"include_usage": True}})

    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert headers["Transfer-Encoding"] == "chunked"
    payloads = sse_payloads(raw)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(filter(None, contents)) == "Hello there friend"
    assert len([c for c in contents if c]) == 3
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": fake.prompt_tokens(body),
        "completion_tokens": count_tokens("Hello there friend"),
        "total_tokens": fake.prompt_tokens(body) + count_tokens("Hello there friend"),
    }


def test_no_usage_chunk_unless_asked(fake):
    _, _, raw = post_raw(fake, {"model": "m", "messages": USER_HI, "stream": True})

    chunks = [json.loads(p) for p in sse_payloads(raw)[:-1]]
    assert all("usage" not in chunk for chunk in chunks)
    assert all(chunk["choices"] for chunk in chunks)


def test_tool_call_arguments_are_split_over_several_chunks(fake):
    fake.script(tool_calls([("call_1", "current_time", {"tz": "UTC", "format": "iso"})]))

    _, _, raw = post_raw(fake, {"model": "m", "messages": USER_HI, "stream": True})

    deltas = [json.loads(p)["choices"][0]["delta"] for p in sse_payloads(raw)[:-1]]
    fragments = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
    assert fragments[0]["id"] == "call_1"
    assert fragments[0]["function"]["name"] == "current_time"
    assert len(fragments) > 3
    arguments = "".join(f["function"]["arguments"] for f in fragments)
    assert json.loads(arguments) == {"tz": "UTC", "format": "iso"}


def test_the_sdk_reads_the_stream_and_tool_calls(fake):
    fake.script(tool_calls([("c1", "a", {"x": 1}), ("c2", "b", "not json")], text="Hm."))

    stream = sdk(fake).chat.completions.create(
        model="m", messages=USER_HI, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)

    calls: dict[int, dict] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for fragment in choice.delta.tool_calls or ():
                call = calls.setdefault(fragment.index, {"id": "", "name": "", "args": ""})
                call["id"] = fragment.id or call["id"]
                call["name"] += fragment.function.name or ""
                call["args"] += fragment.function.arguments or ""
    assert calls == {
        0: {"id": "c1", "name": "a", "args": '{"x": 1}'},
        1: {"id": "c2", "name": "b", "args": "not json"},
    }
    assert chunks[-1].usage.completion_tokens > 0


def test_non_streaming_completion(fake):
    fake.script(text("Plain answer"), tool_calls([("c1", "current_time", {})]))
    client = sdk(fake)

    answer = client.chat.completions.create(model="m", messages=USER_HI)
    calls = client.chat.completions.create(model="m", messages=USER_HI)

    assert answer.choices[0].message.content == "Plain answer"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.prompt_tokens == fake.prompt_tokens(fake.requests[0])
    assert calls.choices[0].finish_reason == "tool_calls"
    assert calls.choices[0].message.tool_calls[0].function.name == "current_time"


def test_models_are_listed():
    with FakeOpenAI(model="qwen2.5-7b") as server:
        assert [m.id for m in sdk(server).models.list()] == ["qwen2.5-7b"]


def test_script_is_fifo_then_the_default_answers(fake):
    fake.script(text("first"), "second")
    client = sdk(fake)

    answers = [
        client.chat.completions.create(model="m", messages=USER_HI).choices[0].message.content
        for _ in range(3)
    ]

    assert answers == ["first", "second", "ok"]
    assert fake.pending == 0


def test_callable_replies_and_default_see_the_request(fake):
    fake.default = echo("you said: ")
    fake.script(lambda body: f"{len(body['messages'])} messages")
    client = sdk(fake)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ping"}]

    first = client.chat.completions.create(model="m", messages=messages)
    second = client.chat.completions.create(model="m", messages=messages)

    assert first.choices[0].message.content == "2 messages"
    assert second.choices[0].message.content == "you said: ping"


def test_requests_are_recorded_and_can_be_awaited(fake):
    client = sdk(fake)
    worker = threading.Thread(
        target=lambda: [
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": n}])
            for n in ("one", "two")
        ]
    )
    worker.start()

    bodies = fake.wait_for_requests(2, timeout=5)
    worker.join()

    assert [b["messages"][0]["content"] for b in bodies] == ["one", "two"]
    assert fake.last_request["messages"][0]["content"] == "two"
    with pytest.raises(AssertionError, match="expected 3 requests"):
        fake.wait_for_requests(3, timeout=0.1)
    fake.reset()
    assert fake.requests == [] and fake.last_request is None


def test_errors_carry_openai_bodies_and_retry_after(fake):
    fake.script(error(429, retry_after=2), error(503), context_length_exceeded())

    responses = [post_raw(fake, {"model": "m", "messages": USER_HI}) for _ in range(3)]

    (s429, h429, b429), (s503, _, b503), (s400, _, b400) = responses
    assert (s429, h429["Retry-After"]) == (429, "2")
    assert json.loads(b429)["error"]["code"] == "rate_limit_exceeded"
    assert s503 == 503 and json.loads(b503)["error"]["type"] == "server_error"
    assert s400 == 400 and json.loads(b400)["error"]["code"] == "context_length_exceeded"


def test_the_sdk_sees_status_errors(fake):
    fake.script(error(401))

    with pytest.raises(openai.AuthenticationError):
        sdk(fake).chat.completions.create(model="m", messages=USER_HI)


def test_api_key_is_enforced_when_set():
    with FakeOpenAI(api_key="sk-right") as server:
        with pytest.raises(openai.AuthenticationError):
            sdk(server).chat.completions.create(model="m", messages=USER_HI)
        right = openai.OpenAI(base_url=server.base_url, api_key="sk-right", max_retries=0)
        assert right.chat.completions.create(model="m", messages=USER_HI).choices


def test_drop_and_broken_streams_are_connection_errors(fake):
    fake.script(drop(), text_then_error("some words first"))
    client = sdk(fake)

    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER_HI, stream=True)
    received = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in client.chat.completions.create(model="m", messages=USER_HI, stream=True):
            received.extend(c.delta.content or "" for c in chunk.choices)

    assert "".join(received) == "some words first"


def test_error_event_in_the_stream(fake):
    fake.script(text_then_error("partial", mode="error"))

    with pytest.raises(openai.APIError, match="stream failed"):
        list(sdk(fake).chat.completions.create(model="m", messages=USER_HI, stream=True))


def test_hang_outlasts_the_client_timeout_and_stop_is_prompt():
    server = FakeOpenAI().start()
    server.script(hang(30))

    with pytest.raises(openai.APITimeoutError):
        sdk(server, timeout=0.3).chat.completions.create(model="m", messages=USER_HI)
    started = time.monotonic()
    server.stop()

    assert time.monotonic() - started < 3


def test_a_client_that_leaves_a_slow_stream_is_noticed(fake):
    fake.script(text(filler_text(50), delay=0.05))

    stream = sdk(fake).chat.completions.create(model="m", messages=USER_HI, stream=True)
    next(iter(stream))
    stream.close()

    fake.wait_until(lambda f: f.client_disconnects == 1, timeout=3)


def test_prompt_tokens_counts_content_tool_arguments_overhead_and_tools(fake):
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    body = {
        "messages": [
            {"role": "system", "content": "You are Hermes."},
            {"role": "user", "content": [{"type": "text", "text": "What time is it?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "12:00"},
        ],
        "tools": tools,
    }

    expected = (
        4 * 4
        + count_tokens("You are Hermes.")
        + count_tokens("What time is it?")
        + count_tokens("{}")
        + count_tokens("12:00")
        + count_tokens(json.dumps(tools))
    )
    assert fake.prompt_tokens(body) == expected


def test_context_window_violations_are_refused_and_recorded():
    with FakeOpenAI(context_window=100) as server:
        server.script(text("fits"))
        client = sdk(server)
        big = [{"role": "user", "content": filler_text(90)}]

        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=big, max_tokens=20)
        fits = client.chat.completions.create(model="m", messages=big, max_tokens=5)

        assert caught.value.code == "context_length_exceeded"
        assert fits.choices[0].message.content == "fits"  # the refusal consumed no reply
        [violation] = server.violations
        assert violation.request_index == 0
        assert violation.prompt_tokens == server.prompt_tokens(big_body := server.requests[0])
        assert violation.max_tokens == big_body["max_tokens"] == 20
        assert violation.total > violation.context_window == 100


def test_configure_points_the_llm_settings_at_the_server(settings):
    with FakeOpenAI(context_window=3000) as server:
        server.configure(settings, LLM_MAX_RETRIES=0)

        assert settings.LLM_PROVIDER == "openai"
        assert server.base_url == settings.LLM_BASE_URL
        assert server.model == settings.LLM_MODEL
        assert settings.LLM_CONTEXT_TOKENS == 3000
        assert settings.LLM_MAX_RETRIES == 0
        assert settings.LLM_RETRY_MAX_SECONDS == 0


def test_runs_standalone():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openai_server", "--port", str(port)]
        + ["--reply-tokens", "12", "--tokens-per-second", "1000"],
        cwd=PROJECT_ROOT,
        env=os.environ | {"PYTHONPATH": str(PROJECT_ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/v1" in banner
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        answer = client.chat.completions.create(model="m", messages=USER_HI)
        assert answer.choices[0].message.content == filler_text(12)
    finally:
        process.terminate()
        process.wait(timeout=10)
