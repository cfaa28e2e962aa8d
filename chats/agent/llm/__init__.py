"""The LLM boundary: the only package that talks to a model provider.

The engine asks `get_provider()` for the process's provider and consumes its `stream()` of
`TextDelta`, `ToolCall`, `Usage` and one `Finish`; failures arrive as `LLMError` (with a
`user_message` safe to show), `LLMNotConfigured` when no model is configured.
"""

from chats.agent.llm.base import (
    ChatProvider,
    Finish,
    LLMError,
    LLMNotConfigured,
    ProviderInfo,
    StreamEvent,
    TextDelta,
    ToolCall,
    Usage,
)
from chats.agent.llm.factory import (
    NoModelProvider,
    build_provider,
    get_provider,
    provider_info,
    reset_provider_cache,
)

# The OpenAI-compatible provider imports the `openai` SDK (tens of MiB): loaded when first
# named, so a process that only shows pages (provider_info) never loads it.
_LAZY = {"LLMContextLengthExceeded", "OpenAICompatProvider"}


def __getattr__(name: str):
    if name in _LAZY:
        from chats.agent.llm import openai_compat

        return getattr(openai_compat, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ChatProvider",
    "Finish",
    "LLMContextLengthExceeded",
    "LLMError",
    "LLMNotConfigured",
    "NoModelProvider",
    "OpenAICompatProvider",
    "ProviderInfo",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "Usage",
    "build_provider",
    "get_provider",
    "provider_info",
    "reset_provider_cache",
]
