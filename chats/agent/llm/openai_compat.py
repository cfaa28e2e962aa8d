"""The provider for OpenAI-compatible Chat Completions servers (OpenAI, OpenRouter, vLLM,
Ollama, llama.cpp server, LM Studio...), on the official `openai` SDK.

The SDK's own retries are off: this module retries connection errors, timeouts, 429 and 5xx
itself (see `retry.py`), and only before anything was streamed to the caller, so a reply is
never duplicated. Every failure that is not retried ends as an `LLMError` whose
`user_message` tells people what happened and what to do.
"""

import json
import logging
import random as random_module
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import openai
from django.conf import settings
from openai import Stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from chats.agent.counting import image_parts_tokens
from chats.agent.llm.base import (
    OPENAI_COMPAT_NAME,
    OPENAI_DEFAULT_BASE_URL,
    Finish,
    LLMError,
    ProviderInfo,
    StreamEvent,
    TextDelta,
    ToolCall,
    Usage,
    openai_compat_info,
)
from chats.agent.llm.keepalive import reusable_body
from chats.agent.llm.retry import RetryPolicy, is_retryable_status, parse_retry_after
from chats.agent.llm.vision import model_takes_images
from chats.agent.tokens import count_tokens

logger = logging.getLogger(__name__)

PROVIDER_NAME = OPENAI_COMPAT_NAME
DEFAULT_BASE_URL = OPENAI_DEFAULT_BASE_URL
# Local servers ignore the key, but the SDK refuses to build a client without one.
PLACEHOLDER_API_KEY = "not-needed"
# Tokens a message costs beyond its text (role, separators); the fake server uses the same.
MESSAGE_OVERHEAD_TOKENS = 4
SAVED_HINT = "Your message is saved; try again later."


class LLMContextLengthExceeded(LLMError):
    """The server refused the request because prompt + reply exceed its context window."""

    kind = "context_length"


def message_text(content) -> str:
    """The text of a message `content`: a string or a list of OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def estimate_prompt_tokens(messages: list[dict], tools: list[dict] | None = None) -> int:
    """Prompt size as counted here when a server reports no usage: every message's text, its
    images and tool call arguments plus a fixed overhead per message, plus the tools JSON."""
    total = 0
    for message in messages:
        content = message.get("content")
        total += MESSAGE_OVERHEAD_TOKENS + count_tokens(message_text(content))
        total += image_parts_tokens(content)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += count_tokens(str(function.get("arguments") or ""))
    if tools:
        total += count_tokens(json.dumps(tools))
    return total


# A data: URL of an image is megabytes of base64: JSON-encoding it again for every request
# costs more than everything else the hub does for a turn. It needs no escaping, so the
# request is encoded with a short placeholder in its place and the URL's bytes spliced in.
_SPLICE_MIN = 4096
_url_bytes: dict[tuple[int, int], bytes] = {}
_URL_BYTES_MAX = 64 * 1024 * 1024
# The placeholder: a NUL and a per-process random tag no text of a request can guess.
_MARK = f"\x00image-{uuid.uuid4().hex}-"
_MARK_JSON = json.dumps(_MARK)[:-1].encode()  # '"\u0000image-…-'


def _spliceable(url: object) -> bool:
    return (
        isinstance(url, str)
        and len(url) >= _SPLICE_MIN
        and url.isascii()
        and url.isprintable()
        and '"' not in url
        and "\\" not in url
    )


def _ascii(url: str) -> bytes:
    key = (hash(url), len(url))
    data = _url_bytes.get(key)
    if data is None:
        if sum(map(len, _url_bytes.values())) + len(url) > _URL_BYTES_MAX:
            _url_bytes.clear()
        data = _url_bytes[key] = url.encode("ascii")
    return data


def request_body(params: dict) -> bytes:
    """`params` as the JSON bytes the SDK would send (compact, UTF-8), with long image URLs
    spliced in as bytes rather than escaped by the encoder."""
    urls: list[str] = []
    messages = []
    for message in params.get("messages") or ():
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") == "image_url" for part in content
        ):
            parts = []
            for part in content:
                url = (part.get("image_url") or {}).get("url") if isinstance(part, dict) else None
                if part.get("type") == "image_url" and _spliceable(url):
                    parts.append(
                        {**part, "image_url": {**part["image_url"], "url": f"{_MARK}{len(urls)}"}}
                    )
                    urls.append(url)
                else:
                    parts.append(part)
            message = {**message, "content": parts}
        messages.append(message)
    encoded = json.dumps(
        {**params, "messages": messages}, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode()
    if not urls:
        return encoded
    pieces = encoded.split(_MARK_JSON)
    out = [pieces[0]]
    for piece in pieces[1:]:
        index, rest = piece.split(b'"', 1)
        out += [b'"', _ascii(urls[int(index)]), b'"', rest]
    return b"".join(out)


@dataclass
class _PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add(self, fragment) -> None:
        if fragment.id and not self.id:
            self.id = fragment.id
        function = fragment.function
        if function is None:
            return
        # OpenAI sends the name once; some servers repeat it in every fragment.
        if function.name and function.name != self.name:
            self.name += function.name
        if function.arguments:
            self.arguments.append(function.arguments)

    def complete(self) -> ToolCall:
        arguments = "".join(self.arguments).strip() or "{}"
        call_id = self.id or f"call_{uuid.uuid4().hex[:24]}"  # some local servers send none
        return ToolCall(id=call_id, name=self.name, arguments=arguments)


@dataclass(frozen=True)
class _Failure:
    """One failed attempt, classified."""

    retryable: bool
    reason: str  # short, for the user message: "HTTP 503", "timed out after 60 s"
    detail: str  # technical, for logs and str(LLMError)
    status: int | None = None
    retry_after: float | None = None
    server_message: str = ""
    code: str = ""


class _Interrupted(Exception):
    """The stream broke after events reached the caller: retrying would duplicate them."""

    def __init__(self, failure: _Failure):
        super().__init__(failure.detail)
        self.failure = failure


class OpenAICompatProvider:
    """Streams Chat Completions from an OpenAI-compatible server, with tools."""

    def __init__(
        self,
        *,
        base_url: str = "",
        api_key: str = "",
        model: str = "",
        context_tokens: int = 8192,
        timeout_seconds: float = 60.0,
        max_retries: int = 3,
        retry_base_seconds: float = 1.0,
        retry_max_seconds: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = random_module.random,
    ):
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.model = model
        self.context_tokens = context_tokens
        self.timeout_seconds = timeout_seconds
        self.retry = RetryPolicy(
            max_retries=max_retries,
            base_seconds=retry_base_seconds,
            max_seconds=retry_max_seconds,
            sleep=sleep,
            random=random,
        )
        self.client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or PLACEHOLDER_API_KEY,
            timeout=timeout_seconds,
            max_retries=0,
        )

    @classmethod
    def from_settings(cls, **overrides) -> "OpenAICompatProvider":
        """A provider configured from the LLM_* settings; keyword arguments win."""
        config = {
            "base_url": settings.LLM_BASE_URL,
            "api_key": settings.LLM_API_KEY,
            "model": settings.LLM_MODEL,
            "context_tokens": settings.LLM_CONTEXT_TOKENS,
            "timeout_seconds": settings.LLM_TIMEOUT_SECONDS,
            "max_retries": settings.LLM_MAX_RETRIES,
            "retry_base_seconds": settings.LLM_RETRY_BASE_SECONDS,
            "retry_max_seconds": settings.LLM_RETRY_MAX_SECONDS,
        }
        config.update(overrides)
        return cls(**config)

    @property
    def info(self) -> ProviderInfo:
        return openai_compat_info(
            model=self.model,
            context_tokens=self.context_tokens,
            base_url=self.base_url,
            supports_images=model_takes_images(self.model, settings.LLM_VISION),
        )

    def close(self) -> None:
        self.client.close()

    # --- the public calls ---------------------------------------------------------------

    def stream(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Iterator[StreamEvent]:
        """Stream one completion: TextDeltas, complete ToolCalls, Usage, then one Finish.
        Retries before the first event only; raises LLMError when it gives up."""
        stop = should_stop or _never
        attempt = 0
        while True:
            if stop():
                yield Finish("cancelled")
                return
            try:
                yield from self._attempt(messages, tools=tools, max_tokens=max_tokens, stop=stop)
                return
            except _Interrupted as interrupted:
                raise self._interrupted_error(interrupted.failure) from interrupted
            except openai.APIError as exc:
                failure = self._classify(exc)
                if not failure.retryable:
                    raise self._refused_error(failure) from exc
                if not self.retry.can_retry(attempt):
                    raise self._gave_up_error(failure, attempts=attempt + 1) from exc
                delay = self.retry.delay(attempt, retry_after=failure.retry_after)
                logger.warning(
                    "Model request failed (%s); retry %d of %d in %.2f s",
                    failure.detail,
                    attempt + 1,
                    self.retry.max_retries,
                    delay,
                )
                self.retry.sleep(delay)
                attempt += 1

    def complete(
        self,
        messages: list[dict],
        *,
        max_tokens: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> str:
        """The whole text of one tool-less completion (for summaries and titles)."""
        parts = []
        for event in self.stream(messages, max_tokens=max_tokens, should_stop=should_stop):
            if isinstance(event, TextDelta):
                parts.append(event.text)
        return "".join(parts)

    # --- one request ------------------------------------------------------------------

    def _request(self, messages, *, tools, max_tokens):
        params = {
            "model": self._model_name(),
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            params["tools"] = tools
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        # The SDK's typed `chat.completions.create` walks every message through its TypedDict
        # transformer: ~150 ms for a 200-message prompt on these machines. Our messages are
        # already plain JSON, so post them through the same client, auth and stream parser,
        # as JSON bytes we encode (`request_body`: images spliced in, not re-escaped).
        return self.client.post(
            "/chat/completions",
            content=request_body(params),
            cast_to=ChatCompletion,
            options={"security": {"bearer_auth": True}},
            stream=True,
            stream_cls=Stream[ChatCompletionChunk],
        )

    def _model_name(self) -> str:
        """LLM_MODEL, or when it is empty the first model the server lists (llama.cpp, LM
        Studio and vLLM serve one model and accept any name; Ollama needs the right one)."""
        if not self.model:
            try:
                listed = [model.id for model in self.client.models.list()]
            except openai.APIError as exc:
                logger.warning("LLM_MODEL is empty and %s lists no models: %s", self.base_url, exc)
                listed = []
            if not listed:
                return "default"  # not remembered: the server may list models later
            self.model = listed[0]
        return self.model

    def _attempt(self, messages, *, tools, max_tokens, stop) -> Iterator[StreamEvent]:
        response = self._request(messages, tools=tools, max_tokens=max_tokens)
        # Read to its end once the reply finished, so the next call reuses this connection.
        body = reusable_body(response)
        emitted = False
        finish_reason: str | None = None
        usage: Usage | None = None
        text_parts: list[str] = []
        partial_calls: dict[int, _PartialToolCall] = {}
        calls_sent = False

        def flush_tool_calls() -> list[ToolCall]:
            return [partial_calls[key].complete() for key in sorted(partial_calls)]

        try:
            chunks = iter(response)
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                except openai.APIError as exc:
                    if finish_reason is not None:
                        # The answer is complete; only the usage or [DONE] went missing.
                        logger.warning("Model stream ended untidily after finishing: %s", exc)
                        break
                    if emitted:
                        raise _Interrupted(self._classify(exc, midway=True)) from exc
                    raise
                except ValueError as exc:  # a chunk that is not JSON
                    failure = _Failure(
                        retryable=False,
                        reason="malformed stream",
                        detail=f"unreadable chunk from {self.base_url}: {exc}",
                    )
                    raise _Interrupted(failure) from exc
                if stop():
                    response.close()
                    yield Finish("cancelled")
                    return
                if chunk.usage is not None:
                    usage = Usage(
                        prompt_tokens=chunk.usage.prompt_tokens or 0,
                        completion_tokens=chunk.usage.completion_tokens or 0,
                    )
                for choice in chunk.choices or ():
                    if choice.index not in (0, None):
                        continue
                    delta = choice.delta
                    if delta is not None:
                        if delta.content:
                            text_parts.append(delta.content)
                            emitted = True
                            yield TextDelta(delta.content)
                        for fragment in delta.tool_calls or ():
                            _partial_for(partial_calls, fragment).add(fragment)
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
                        if body is not None:
                            body.reply_finished = True
                        if finish_reason == "tool_calls" and not calls_sent:
                            calls_sent = True
                            for call in flush_tool_calls():
                                emitted = True
                                yield call
        finally:
            response.close()

        calls = [] if calls_sent else flush_tool_calls()
        for call in calls:
            yield call
        if partial_calls and finish_reason in (None, "stop"):
            # Some servers report "stop" after tool calls; the engine needs to know.
            finish_reason = "tool_calls"
        if finish_reason is None:
            logger.warning("Model stream from %s ended without a finish reason", self.base_url)
            finish_reason = "stop"
        if usage is None:
            usage = Usage(
                prompt_tokens=estimate_prompt_tokens(messages, tools),
                completion_tokens=_completion_tokens("".join(text_parts), partial_calls),
            )
        yield usage
        yield Finish(finish_reason)

    # --- errors -----------------------------------------------------------------------

    def _classify(self, exc: openai.APIError, *, midway: bool = False) -> _Failure:
        """`midway`: the reply had already started when `exc` happened."""
        if isinstance(exc, openai.APITimeoutError):
            seconds = f"{self.timeout_seconds:g}"
            reason = f"nothing more for {seconds} s" if midway else f"no answer within {seconds} s"
            return _Failure(
                retryable=True,
                reason=reason,
                detail=f"timed out after {seconds} s waiting for {self.base_url}",
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            return _Failure(
                retryable=True,
                reason="the connection was lost" if midway else f"could not reach {self.base_url}",
                detail=f"connection to {self.base_url} failed: {cause or exc}",
            )
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            server_message, code = _server_error(exc)
            return _Failure(
                retryable=is_retryable_status(status),
                reason=f"HTTP {status}",
                detail=f"HTTP {status} from {self.base_url}: {server_message or exc.message}",
                status=status,
                retry_after=parse_retry_after(exc.response.headers),
                server_message=server_message,
                code=code,
            )
        # An error object inside the stream (`data: {"error": ...}`) or anything else.
        server_message, code = _server_error(exc)
        return _Failure(
            retryable=False,
            reason="server error",
            detail=f"error from {self.base_url}: {server_message or exc}",
            server_message=server_message,
            code=code,
        )

    def _gave_up_error(self, failure: _Failure, *, attempts: int) -> LLMError:
        tried = f"after {attempts} attempts " if attempts > 1 else ""
        return LLMError(
            f"gave up after {attempts} attempt(s): {failure.detail}",
            user_message=f"The model server did not answer {tried}({failure.reason}). {SAVED_HINT}",
            status=failure.status,
        )

    def _interrupted_error(self, failure: _Failure) -> LLMError:
        return LLMError(
            f"stream broke after the reply had started: {failure.detail}",
            user_message=(
                f"The model server broke off its reply midway ({failure.reason}). {SAVED_HINT}"
            ),
            status=failure.status,
        )

    def _refused_error(self, failure: _Failure) -> LLMError:
        status = failure.status
        said = f": {_shorten(failure.server_message)}" if failure.server_message else ""
        if _is_context_overflow(failure):
            return LLMContextLengthExceeded(
                failure.detail,
                user_message=(
                    "The conversation is too long for the model's context window "
                    f"(LLM_CONTEXT_TOKENS={self.context_tokens}). Start a new topic or lower "
                    "LLM_CONTEXT_TOKENS to match the model."
                ),
                status=status,
            )
        if status == 401:
            user_message = "The model server rejected the API key (LLM_API_KEY)."
        elif status == 403:
            user_message = (
                f"The model server refused access to model '{self.model}' (HTTP 403); "
                "check LLM_API_KEY and LLM_MODEL."
            )
        elif status == 404:
            user_message = (
                f"The model server at {self.base_url} does not know model '{self.model}' "
                "(HTTP 404); check LLM_MODEL and LLM_BASE_URL."
            )
        elif status is not None:
            user_message = f"The model server rejected the request (HTTP {status}){said}."
        else:
            user_message = f"The model server reported an error{said}. {SAVED_HINT}"
        return LLMError(failure.detail, user_message=user_message, status=status)


def _never() -> bool:
    return False


def _partial_for(partial_calls: dict[int, _PartialToolCall], fragment) -> _PartialToolCall:
    index = fragment.index
    if index is None:
        # Servers that omit the index: a new id starts a new call, the rest continue the last.
        last = max(partial_calls) if partial_calls else None
        starts_new = last is None or bool(fragment.id and fragment.id != partial_calls[last].id)
        index = len(partial_calls) if starts_new else last
    return partial_calls.setdefault(index, _PartialToolCall())


def _completion_tokens(text: str, partial_calls: dict[int, _PartialToolCall]) -> int:
    total = count_tokens(text)
    for call in partial_calls.values():
        total += count_tokens(call.name) + count_tokens("".join(call.arguments))
    return total


def _server_error(exc: openai.APIError) -> tuple[str, str]:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or body.get("error") or ""
        code = body.get("code") or body.get("type") or ""
        return str(message), str(code)
    if isinstance(body, str):
        return body, ""
    return "", ""


def _is_context_overflow(failure: _Failure) -> bool:
    if failure.status in (401, 403, 404):
        return False
    if failure.code in ("context_length_exceeded", "exceed_context_size_error"):
        return True
    text = failure.server_message.lower()
    return "context" in text and any(word in text for word in ("length", "size", "window"))


def _shorten(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
