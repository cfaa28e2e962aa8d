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
    reset_provider_cache,
)
from chats.agent.llm.openai_compat import LLMContextLengthExceeded, OpenAICompatProvider

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
    "reset_provider_cache",
]
