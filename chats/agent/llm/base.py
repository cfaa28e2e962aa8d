"""The provider interface: the only shape in which the engine sees a model.

A provider streams `StreamEvent`s for one Chat Completions request: text deltas as they
arrive, each tool call once complete, the usage, then exactly one `Finish`. Messages and
tool specs use the OpenAI Chat Completions format (role/content/tool_calls/tool_call_id).
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON text the model produced; the engine validates it


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Finish:
    reason: str  # "stop", "tool_calls", "length", "content_filter", "cancelled"


StreamEvent = TextDelta | ToolCall | Usage | Finish


class LLMError(Exception):
    """A model request failed for good (after the provider's retries).

    `user_message` is safe to show to people; `str(exc)` may carry technical detail."""

    def __init__(self, message: str, *, user_message: str | None = None, status: int | None = None):
        super().__init__(message)
        self.user_message = user_message or message
        self.status = status

    @property
    def kind(self) -> str:
        """A short, bounded name of what went wrong, for counting errors by kind."""
        if self.status is None:
            return "unreachable"  # no HTTP answer: connection lost, timeout, broken stream
        if self.status == 429:
            return "rate_limited"
        if self.status in (401, 403):
            return "auth"
        if self.status >= 500:
            return "server"
        return "rejected"


class LLMNotConfigured(LLMError):
    """No model is configured: the turn fails with instructions for configuring one."""

    kind = "not_configured"


@dataclass(frozen=True)
class ProviderInfo:
    name: str  # "openai-compatible", "local", "none"
    model: str
    context_tokens: int
    supports_tools: bool
    is_demo: bool = False  # the small offline demo model: UIs say so
    supports_images: bool = False  # takes image parts in messages (LLM_VISION, llm.vision)
    notice: str = ""  # one sentence for status pages and the CLI
    extra: dict = field(default_factory=dict)


# The OpenAI-compatible provider's name and default server, here so that describing it
# (openai_compat_info) needs no import of the SDK.
OPENAI_COMPAT_NAME = "openai-compatible"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


def openai_compat_info(
    *, model: str, context_tokens: int, base_url: str, supports_images: bool = False
) -> ProviderInfo:
    """What the OpenAI-compatible provider says of itself (pages and status commands)."""
    return ProviderInfo(
        name=OPENAI_COMPAT_NAME,
        model=model or "(server default)",
        context_tokens=context_tokens,
        supports_tools=True,
        supports_images=supports_images,
        extra={"base_url": (base_url or OPENAI_DEFAULT_BASE_URL).rstrip("/")},
    )


@runtime_checkable
class ChatProvider(Protocol):
    info: ProviderInfo

    def stream(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Iterator[StreamEvent]:
        """Stream one completion. `should_stop` is polled between chunks; when it returns True
        the provider closes the request and yields `Finish("cancelled")`. Raises LLMError."""
        ...
