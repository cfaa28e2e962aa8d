"""The two small protocols through which apps plug into the engine.

A **tool provider** contributes tools (name, description, JSON schema, handler, channels
where allowed); a **prompt section provider** renders one block of the system prompt.
Apps register theirs in `AppConfig.ready()`; the engine never imports `memory` or `skills`.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from chats.models import Actor, Chat, Message, Turn


ORIGIN_CHAT = "chat"
ORIGIN_REVIEW = "review"


@dataclass(frozen=True)
class TurnContext:
    """What a tool handler or prompt section may know about the turn it serves."""

    chat: "Chat"
    trigger: "Message"
    turn: "Turn | None" = None
    actor: "Actor | None" = None
    person: Any = None  # the Person behind the trigger's actor, if linked
    # "chat": a turn answering people. "review": a background review after `turn`, whose
    # tools must only ever propose (never apply) and never count as the chat's own use.
    origin: str = ORIGIN_CHAT
    review_id: int | None = None  # the review run this context serves (origin "review")
    # Set by the context builder for prompt sections: the history the model sees comes after
    # this message id (the newest summary's range or reset marker; 0: from the start). It
    # changes exactly when the context is compressed or reset.
    history_start_id: int | None = None

    @property
    def channel(self) -> str:
        return self.chat.channel


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # JSON schema of the arguments object
    handler: Callable[[TurnContext, dict], Any]  # returns str or JSON-serialisable data
    channels: frozenset[str] | None = None  # None: every channel
    timeout_seconds: float | None = None  # None: settings.AGENT_TOOL_TIMEOUT_SECONDS

    def allowed_on(self, channel: str) -> bool:
        return self.channels is None or channel in self.channels

    def spec(self) -> dict:
        """The OpenAI `tools` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class SectionText(str):
    """A prompt section's text that also tells the turn's prompt report something about
    itself (`details`, JSON-serialisable: e.g. how many items it listed and left out)."""

    details: dict

    def __new__(cls, text: str = "", details: dict | None = None) -> "SectionText":
        section_text = super().__new__(cls, text)
        section_text.details = dict(details or {})
        return section_text


class ToolProvider(Protocol):
    def tools(self) -> Iterable[Tool]: ...


class PromptSectionProvider(Protocol):
    name: str
    order: int  # lower renders first

    def render(self, context: TurnContext) -> str:
        """The section's text for this turn, or "" to leave it out; a SectionText adds its
        details to the prompt report."""
        ...


@dataclass
class Registry:
    tool_providers: list[ToolProvider] = field(default_factory=list)
    prompt_sections: list[PromptSectionProvider] = field(default_factory=list)

    def tools_for(self, channel: str) -> list[Tool]:
        """Every registered tool allowed on `channel` (two tools with one name are an error)."""
        tools: dict[str, Tool] = {}
        for provider in self.tool_providers:
            for tool in provider.tools():
                if tool.name in tools:
                    raise ValueError(f"two tools are named {tool.name!r}")
                if tool.allowed_on(channel):
                    tools[tool.name] = tool
        return list(tools.values())

    def sections(self) -> list[PromptSectionProvider]:
        return sorted(self.prompt_sections, key=lambda section: (section.order, section.name))


registry = Registry()


def register_tool_provider(provider: ToolProvider) -> None:
    if provider not in registry.tool_providers:
        registry.tool_providers.append(provider)


def register_prompt_section(provider: PromptSectionProvider) -> None:
    if provider not in registry.prompt_sections:
        registry.prompt_sections.append(provider)
