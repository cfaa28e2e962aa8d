"""The OpenAI-compatible provider and the provider factory, against the fake server over
real HTTP (the SDK is never mocked). Sleeps are recorded instead of waited."""

import email.utils
import socket
import sys
import time
import types

import pytest
from django.core.exceptions import ImproperlyConfigured

from chats.agent.llm import (
    ChatProvider,
    Finish,
    LLMContextLengthExceeded,
    LLMError,
    LLMNotConfigured,
    NoModelProvider,
    OpenAICompatProvider,
    TextDelta,
    ToolCall,
    Usage,
    get_provider,
    reset_provider_cache,
)
from chats.agent.llm.retry import RetryPolicy, parse_retry_after
from chats.agent.tokens import count_tokens
from tests.fakes.openai_server import (
    FakeOpenAI,
    drop,
    error,
    filler_text,
    hang,
    text,
    text_then_error,
    tool_calls,
)
from tests.fakes.tls import self_signed_certificate

HELLO = [{"role": "user", "content": "Hello, who are you?"}]


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def provider_for(sleeps):
    def make(fake_or_url, **overrides):
        base_url = fake_or_url if isinstance(fake_or_url, str) else fake_or_url.base_url
        config = {
            "base_url": base_url,
            "model": "fake-model",
            "context_tokens": 4096,
            "timeout_seconds": 5.0,
            "max_retries": 3,
            "retry_base_seconds": 1.0,
            "retry_max_seconds": 30.0,
            "sleep": sleeps.append,
            "random": lambda: 0.5,
        }
        config.update(overrides)
        return OpenAICompatProvider(**config)

    return make


def collect(events):
    return list(events)


def texts(events):
    return [event.text for event in events if isinstance(event, TextDelta)]


# --- streaming ------------------------------------------------------------------------


def test_text_streams_as_several_deltas_then_usage_then_finish(fake, provider_for):
    fake.script(text("The quick brown fox jumps over the lazy dog."))

    events = collect(provider_for(fake).stream(HELLO))

    assert len(texts(events)) > 3
    assert "".join(texts(events)) == "The quick brown fox jumps over the lazy dog."
    assert isinstance(events[-2], Usage)
    assert events[-1] == Finish("stop")
    assert [type(event) for event in events].count(Finish) == 1


def test_usage_reported_by_the_server_is_passed_through(fake, provider_for):
    fake.script(text("Four words right here"))

    usage = [e for e in provider_for(fake).stream(HELLO) if isinstance(e, Usage)]

    assert usage == [
        Usage(
            prompt_tokens=fake.prompt_tokens(fake.last_request),
            completion_tokens=count_tokens("Four words right here"),
        )
    ]


def test_usage_is_estimated_when_the_server_reports_none(fake, provider_for):
    fake.script(text("No usage from this server", usage=False))

    events = collect(provider_for(fake).stream(HELLO))

    assert events[-2] == Usage(
        prompt_tokens=4 + count_tokens(HELLO[0]["content"]),
        completion_tokens=count_tokens("No usage from this server"),
    )
    assert events[-1] == Finish("stop")


def test_request_carries_model_tools_limit_and_asks_for_usage(fake, provider_for):
    tools = [{"type": "function", "function": {"name": "current_time", "parameters": {}}}]

    collect(provider_for(fake).stream(HELLO, tools=tools, max_tokens=123))

    body = fake.last_request
    assert body["model"] == "fake-model"
    assert body["messages"] == HELLO
    assert body["tools"] == tools
    assert body["max_tokens"] == 123
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_empty_api_key_sends_a_placeholder_and_a_set_key_is_sent(fake, provider_for):
    collect(provider_for(fake, api_key="").stream(HELLO))
    collect(provider_for(fake, api_key="sk-team").stream(HELLO))

    assert [h["authorization"] for h in fake.request_headers] == [
        "Bearer not-needed",
        "Bearer sk-team",
    ]


def test_length_finish_reason_is_reported(fake, provider_for):
    fake.script(text("cut short", finish_reason="length"))

    assert collect(provider_for(fake).stream(HELLO))[-1] == Finish("length")


def test_two_tool_calls_are_assembled_from_fragmented_deltas(fake, provider_for):
    fake.script(
        tool_calls(
            [
                ("call_1", "current_time", {"tz": "Europe/Berlin"}),
                ("call_2", "web_search", {"query": "weather in Berlin", "limit": 3}),
            ],
            text="Let me check.",
            argument_chunk_size=5,
        )
    )

    events = collect(provider_for(fake).stream(HELLO))

    calls = [event for event in events if isinstance(event, ToolCall)]
    assert calls == [
        ToolCall("call_1", "current_time", '{"tz": "Europe/Berlin"}'),
        ToolCall("call_2", "web_search", '{"query": "weather in Berlin", "limit": 3}'),
    ]
    assert "".join(texts(events)) == "Let me check."
    assert isinstance(events[-2], Usage)
    assert events[-1] == Finish("tool_calls")


def test_invalid_tool_arguments_reach_the_engine_verbatim(fake, provider_for):
    fake.script(tool_calls([("call_9", "current_time", '{"tz": "UTC"')]))

    calls = [e for e in provider_for(fake).stream(HELLO) if isinstance(e, ToolCall)]

    assert calls == [ToolCall("call_9", "current_time", '{"tz": "UTC"')]


def test_should_stop_cancels_a_slow_stream_promptly(fake, provider_for):
    fake.script(text(filler_text(100), delay=0.1))  # ten seconds of reply
    seen = []

    started = time.monotonic()
    for event in provider_for(fake).stream(HELLO, should_stop=lambda: len(seen) >= 3):
        seen.append(event)
    elapsed = time.monotonic() - started

    assert seen[-1] == Finish("cancelled")
    assert len(texts(seen)) == 3
    assert elapsed < 5  # generous: the point is "not the whole ten seconds"
    fake.wait_until(lambda f: f.client_disconnects >= 1, timeout=3)


def test_should_stop_before_the_request_sends_nothing(fake, provider_for):
    events = collect(provider_for(fake).stream(HELLO, should_stop=lambda: True))

    assert events == [Finish("cancelled")]
    assert fake.requests == []


def test_complete_returns_the_whole_text(fake, provider_for):
    fake.script(text("A short summary of the chat."))

    assert provider_for(fake).complete(HELLO, max_tokens=50) == "A short summary of the chat."
    assert fake.last_request["max_tokens"] == 50
    assert "tools" not in fake.last_request


def test_sequential_calls_reuse_one_https_connection(tmp_path, monkeypatch, provider_for):
    # A connection per call costs a TCP and a TLS handshake against a remote model server.
    certificate = self_signed_certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate.cert_path))  # trust the fake's cert
    with FakeOpenAI(tls=certificate.server_context()) as server:
        provider = provider_for(server)
        server.script(
            text("one"),
            tool_calls([("call_1", "current_time", {})]),
            text("three", usage=False),
            text("four"),
        )
        replies = [texts(provider.stream(HELLO)) for _ in range(3)]
        replies.append([provider.complete(HELLO)])

        assert replies == [["one"], [], ["three"], ["four"]]
        assert server.connections == 1


@pytest.mark.timeout(30)  # without its own bound, draining would wait the 120 s read timeout
def test_a_body_left_open_after_done_still_ends_the_reply(fake, provider_for):
    fake.script(text("all here", linger_after_done=3600), text("next"))
    provider = provider_for(fake, timeout_seconds=120.0)

    events = collect(provider.stream(HELLO))
    assert texts(events) == ["all", " here"]
    assert events[-1] == Finish("stop")
    assert texts(provider.stream(HELLO)) == ["next"]  # on a new connection
    assert fake.connections == 2


def test_info_describes_the_server(fake, provider_for):
    provider = provider_for(fake, context_tokens=32000)

    assert isinstance(provider, ChatProvider)
    assert provider.info.name == "openai-compatible"
    assert provider.info.model == "fake-model"
    assert provider.info.context_tokens == 32000
    assert provider.info.supports_tools is True


def test_empty_model_uses_the_first_model_the_server_lists(provider_for):
    with FakeOpenAI(model="llama-3.2-3b") as server:
        provider = provider_for(server, model="")
        collect(provider.stream(HELLO))

        assert server.last_request["model"] == "llama-3.2-3b"
        assert provider.info.model == "llama-3.2-3b"


def test_from_settings_reads_the_llm_settings(settings):
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.LLM_API_KEY = ""
    settings.LLM_MODEL = "some-model"
    settings.LLM_CONTEXT_TOKENS = 16384
    settings.LLM_TIMEOUT_SECONDS = 7.0
    settings.LLM_MAX_RETRIES = 5
    settings.LLM_RETRY_BASE_SECONDS = 0.25
    settings.LLM_RETRY_MAX_SECONDS = 4.0

    provider = OpenAICompatProvider.from_settings()

    assert provider.base_url == "http://127.0.0.1:9/v1"
    assert provider.info.model == "some-model"
    assert provider.info.context_tokens == 16384
    assert provider.timeout_seconds == 7.0
    assert provider.retry.max_retries == 5
    assert provider.retry.base_seconds == 0.25
    assert provider.retry.max_seconds == 4.0


# --- retries --------------------------------------------------------------------------


def test_429_waits_as_long_as_retry_after_says_then_succeeds(fake, provider_for, sleeps):
    fake.script(error(429, retry_after=2), text("Back again."))

    events = collect(provider_for(fake).stream(HELLO))

    assert sleeps == [2.0]
    assert len(fake.requests) == 2
    assert "".join(texts(events)) == "Back again."


def test_retry_after_as_an_http_date_is_honoured_up_to_the_cap(fake, provider_for, sleeps):
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    fake.script(error(429, retry_after=in_a_minute), text("ok"))

    collect(provider_for(fake, retry_max_seconds=5.0).stream(HELLO))

    assert sleeps == [5.0]


def test_5xx_are_retried_with_growing_jittered_delays(fake, provider_for, sleeps):
    fake.script(error(500), error(503), error(502), text("Finally."))

    events = collect(provider_for(fake, random=lambda: 0.5).stream(HELLO))

    assert sleeps == [0.5, 1.0, 2.0]  # half of 1, 2, 4 seconds: full jitter at 0.5
    assert "".join(texts(events)) == "Finally."
    assert len(fake.requests) == 4


def test_jitter_stays_under_the_exponential_ceiling_and_the_cap():
    import random

    policy = RetryPolicy(base_seconds=1.0, max_seconds=5.0, random=random.Random(7).random)

    delays = [policy.delay(attempt) for attempt in range(6) for _ in range(50)]

    for index, delay in enumerate(delays):
        assert 0 <= delay <= min(5.0, 2 ** (index // 50))
    assert len(set(delays)) > 100  # really random


def test_persistent_500_gives_up_after_one_plus_max_retries(fake, provider_for, sleeps):
    fake.default = error(500)

    with pytest.raises(LLMError) as caught:
        collect(provider_for(fake, max_retries=3).stream(HELLO))

    assert len(fake.requests) == 4
    assert len(sleeps) == 3
    assert caught.value.status == 500
    assert caught.value.user_message == (
        "The model server did not answer after 4 attempts (HTTP 500). "
        "Your message is saved; try again later."
    )


def test_connection_refused_is_retried_then_fails(provider_for, sleeps):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = provider_for(f"http://127.0.0.1:{port}/v1", max_retries=2)

    with pytest.raises(LLMError) as caught:
        collect(provider.stream(HELLO))

    assert len(sleeps) == 2
    assert "did not answer after 3 attempts" in caught.value.user_message
    assert f"127.0.0.1:{port}" in caught.value.user_message


def test_a_dropped_connection_before_the_answer_is_retried(fake, provider_for, sleeps):
    fake.script(drop(), text("Second time lucky."))

    events = collect(provider_for(fake).stream(HELLO))

    assert len(sleeps) == 1
    assert "".join(texts(events)) == "Second time lucky."


def test_timeouts_are_retried_then_fail(fake, provider_for, sleeps):
    fake.default = hang(10)

    with pytest.raises(LLMError) as caught:
        collect(provider_for(fake, timeout_seconds=0.5, max_retries=1).stream(HELLO))

    assert len(fake.requests) == 2
    assert len(sleeps) == 1
    assert "no answer within 0.5 s" in caught.value.user_message


def test_a_stream_that_stalls_before_the_first_delta_is_retried(fake, provider_for, sleeps):
    fake.script(hang(10, after_headers=True), text("Recovered."))

    events = collect(provider_for(fake, timeout_seconds=0.5).stream(HELLO))

    assert len(sleeps) == 1
    assert "".join(texts(events)) == "Recovered."


def test_401_is_not_retried(fake, provider_for, sleeps):
    fake.script(error(401), text("never sent"))

    with pytest.raises(LLMError) as caught:
        collect(provider_for(fake).stream(HELLO))

    assert len(fake.requests) == 1
    assert sleeps == []
    assert caught.value.status == 401
    assert caught.value.user_message == "The model server rejected the API key (LLM_API_KEY)."


def test_unknown_model_is_not_retried_and_names_the_settings(fake, provider_for, sleeps):
    fake.script(error(404))

    with pytest.raises(LLMError) as caught:
        collect(provider_for(fake, model="gpt-9").stream(HELLO))

    assert sleeps == []
    assert "gpt-9" in caught.value.user_message
    assert "LLM_MODEL" in caught.value.user_message


def test_bad_request_is_not_retried_and_quotes_the_server(fake, provider_for, sleeps):
    fake.script(error(400, message="messages[0].role is invalid"))

    with pytest.raises(LLMError) as caught:
        collect(provider_for(fake).stream(HELLO))

    assert sleeps == []
    assert "HTTP 400" in caught.value.user_message
    assert "messages[0].role is invalid" in caught.value.user_message


def test_context_overflow_is_its_own_error_and_not_retried(provider_for, sleeps):
    long_history = [{"role": "user", "content": filler_text(300)}]
    with FakeOpenAI(context_window=200) as server:
        provider = provider_for(server, context_tokens=200)

        with pytest.raises(LLMContextLengthExceeded) as caught:
            collect(provider.stream(long_history, max_tokens=50))

        assert sleeps == []
        assert caught.value.status == 400
        assert "context window" in caught.value.user_message
        assert len(server.violations) == 1


def test_error_mid_stream_after_text_fails_without_retrying(fake, provider_for, sleeps):
    fake.script(text_then_error("The first half of"), text("a duplicate"))
    seen = []

    with pytest.raises(LLMError) as caught:
        for event in provider_for(fake).stream(HELLO):
            seen.append(event)

    assert "".join(texts(seen)) == "The first half of"
    assert len(fake.requests) == 1
    assert fake.pending == 1
    assert sleeps == []
    assert "broke off its reply midway" in caught.value.user_message


def test_error_event_mid_stream_fails_without_retrying(fake, provider_for, sleeps):
    fake.script(text_then_error("Partial", mode="error"), text("a duplicate"))

    with pytest.raises(LLMError):
        collect(provider_for(fake).stream(HELLO))

    assert len(fake.requests) == 1
    assert sleeps == []


def test_parse_retry_after_reads_seconds_dates_and_milliseconds():
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)

    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after": date}, now=lambda: now) == pytest.approx(30, abs=1)
    assert parse_retry_after({"Retry-After-Ms": "1500"}) == 1.5
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


# --- the factory ----------------------------------------------------------------------


@pytest.fixture
def fresh_cache():
    reset_provider_cache()
    yield
    reset_provider_cache()


@pytest.fixture
def local_module(monkeypatch):
    """Installs a stand-in for chats.agent.llm.local whose availability the test decides."""

    def install(available: bool | None):
        if available is None:
            monkeypatch.setitem(sys.modules, "chats.agent.llm.local", None)  # ImportError
            return None

        class LocalProvider:
            info = NoModelProvider().info  # any ProviderInfo will do

            @staticmethod
            def available():
                return available

        module = types.ModuleType("chats.agent.llm.local")
        module.LocalProvider = LocalProvider
        monkeypatch.setitem(sys.modules, "chats.agent.llm.local", module)
        return LocalProvider

    return install


def test_auto_picks_the_openai_server_when_a_base_url_is_set(settings, fresh_cache, fake):
    settings.LLM_PROVIDER = "auto"
    settings.LLM_BASE_URL = fake.base_url

    provider = get_provider()

    assert isinstance(provider, OpenAICompatProvider)
    assert provider.base_url == fake.base_url


def test_auto_picks_the_local_model_when_it_is_available(settings, fresh_cache, local_module):
    settings.LLM_PROVIDER = "auto"
    settings.LLM_BASE_URL = ""
    local_class = local_module(True)

    assert isinstance(get_provider(), local_class)


@pytest.mark.parametrize("available", [False, None], ids=["unavailable", "not-importable"])
def test_auto_falls_back_to_no_model(settings, fresh_cache, local_module, available):
    settings.LLM_PROVIDER = "auto"
    settings.LLM_BASE_URL = ""
    local_module(available)

    assert isinstance(get_provider(), NoModelProvider)


def test_forced_choices(settings, fresh_cache, local_module):
    local_module(True)
    settings.LLM_BASE_URL = ""

    settings.LLM_PROVIDER = "openai"
    assert isinstance(get_provider(), OpenAICompatProvider)  # the OpenAI default URL

    settings.LLM_PROVIDER = "none"
    assert isinstance(get_provider(), NoModelProvider)

    settings.LLM_PROVIDER = "local"
    assert type(get_provider()).__name__ == "LocalProvider"


def test_forced_local_without_the_model_explains_why(settings, fresh_cache, local_module):
    settings.LLM_PROVIDER = "local"
    local_module(False)

    provider = get_provider()

    assert isinstance(provider, NoModelProvider)
    assert "LLM_PROVIDER=local" in provider.info.notice


def test_unknown_choice_is_a_configuration_error(settings, fresh_cache):
    settings.LLM_PROVIDER = "gpt"

    with pytest.raises(ImproperlyConfigured, match="LLM_PROVIDER"):
        get_provider()


def test_the_provider_is_cached_until_reset(settings, fresh_cache, fake):
    settings.LLM_PROVIDER = "openai"
    settings.LLM_BASE_URL = fake.base_url

    first = get_provider()
    assert get_provider() is first

    reset_provider_cache()
    assert get_provider() is not first


def test_changing_an_llm_setting_forgets_the_cached_provider(settings, fresh_cache, fake):
    settings.LLM_PROVIDER = "none"
    assert isinstance(get_provider(), NoModelProvider)

    fake.configure(settings)

    assert isinstance(get_provider(), OpenAICompatProvider)
    assert get_provider().base_url == fake.base_url


def test_no_model_provider_fails_with_instructions(settings):
    provider = NoModelProvider()

    with pytest.raises(LLMNotConfigured) as caught:
        collect(provider.stream(HELLO))

    message = caught.value.user_message
    for hint in ("LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL", ".env", "make run", "local"):
        assert hint in message
    assert provider.info.name == "none"
    assert provider.info.supports_tools is False
    assert "No language model is configured" in provider.info.notice
    assert isinstance(provider, ChatProvider)
