"""The small protocols through which apps plug into the engine.

A **tool provider** contributes tools (name, description, JSON schema, handler, channels
where allowed); a **prompt section provider** renders one block of the system prompt; a
**history scope provider** may narrow the history one turn sees (a scheduled run in its own
fresh context). Apps register theirs in `AppConfig.ready()`; the engine never imports
`memory`, `skills` or `schedules`.

A **message parts provider** (`message_parts_register`) tells what a stored message carries
to the model besides its text (its files: image parts, a document's text). The builder asks
it once per request, about the messages of the window whose metadata names it under
`CARRIES_KEY`, so a chat where no message carries anything never calls it.

A **tool files store** (`register_tool_files_store`) keeps the files a tool returned beside
its text (a tool server's images and resources: `ToolFile`s on a `ToolReply`) on the stored
tool result message, e.g. as attachments; the message then names a message parts provider,
and the loop passes what it carries to the model in a labelled user message after the step
(Chat Completions takes no images in tool messages). The engine never imports
`attachments`.

A **turn gate** (`register_turn_gate`) is asked before a turn calls the model and again
between the iterations of its tool loop; it may end the turn with an answer instead (the
budgets app: a monthly cap is used up). The engine never imports `budgets`.
"""

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django.db import transaction

if TYPE_CHECKING:
    from chats.models import Actor, Chat, Message, Turn


logger = logging.getLogger(__name__)

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
    # A background review (origin "review"): the history it reads comes after this message id
    # (its range), so what it proposes may have drawn on anything after it.
    covers_after_id: int | None = None

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
    # Told (context, arguments or None, reason) when the engine refuses a call before the
    # handler runs (bad JSON, arguments that break the schema): lets a provider audit it.
    on_refused: Callable[[TurnContext, Any, str], None] | None = None
    # Told (context, arguments, outcome) in the turn's own thread once the handler returned
    # (outcome: its value) or raised (the exception; TimeoutError when the engine gave up):
    # lets a provider write its audit there, not in the worker thread, whose database
    # connection is closed after every call.
    on_finished: Callable[[TurnContext, dict, Any], None] | None = None
    # Asked (context, call id, arguments) before the call runs: may refuse it or make the turn
    # wait for a person's decision (see `Gate`). None: every valid call runs. A gate's
    # `note` reaches `on_finished` as its keyword `note` (only when the gate gave one).
    gate: "Callable[[TurnContext, str, dict], Gate] | None" = None
    # The tool server the tool comes from (its slug), for traces; empty: the hub's own.
    server: str = ""

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


@dataclass(frozen=True)
class Gate:
    """What a tool's gate says about one call, asked in the turn's own thread before the
    call runs (after its arguments passed the schema):

    - `run`: run it; `note` is handed to `Tool.on_finished` (e.g. who approved it);
    - `refuse`: do not run it; `message` is the error result the model reads;
    - `wait`: a person must decide first: the turn moves to `waiting`, `hold` (if any) runs
      in the same transaction (to store what is to be decided), `card` describes the
      decision for the `turn.waiting` event, and the turn continues once decided, when the
      gate is asked again about the same call (`call_id`)."""

    outcome: str
    message: str = ""
    note: Any = None
    hold: Callable[[], object] | None = None
    card: dict | None = None
    reason: str = ""

    RUN = "run"
    REFUSE = "refuse"
    WAIT = "wait"


@dataclass(frozen=True)
class TurnSpend:
    """What the running turn has spent that is not in the usage ledger yet (its counters are
    recorded only when they are stored: at the turn's end or when it waits)."""

    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


# A stored message whose metadata holds CARRIES_KEY: [provider name, …] carries more than its
# text to the model; the app that stores what it carries (attachments) sets it.
CARRIES_KEY = "carries"


@dataclass(frozen=True)
class CarriedImage:
    """An image a message carries: its URL (a `data:` URL) and what it costs in the request,
    which the provider knows (the engine reads no image format)."""

    url: str
    tokens: int


@dataclass(frozen=True)
class Carried:
    """What one message carries to the model: `text` (a text part after the message's own;
    framed by the provider as quoted material) and `images`; `report` goes to the turn's
    prompt report. The provider keeps text and images within the cap it was given."""

    text: str = ""
    images: tuple[CarriedImage, ...] = ()
    report: Any = None


@dataclass(frozen=True)
class CarryRequest:
    """One question to a message parts provider: the messages of this request that name it
    (`caps`: message id -> the most tokens its parts may cost), the trigger's id, the model
    the request goes to (`provider_info.supports_images`) and the turn."""

    caps: dict[int, int]
    trigger_id: int
    provider_info: Any
    turn_context: TurnContext


# (request) -> {message id: Carried} for the messages it has something for.
MessagePartsProvider = Callable[[CarryRequest], "dict[int, Carried]"]
# Told (turn, reply message or None) in the transaction that stores the turn's reply.
ReplyStoredHook = Callable[["Turn", "Message | None"], None]


# A turn gate: (context, the turn's unrecorded spend) -> None to go on, or the answer the
# person gets instead of a model reply (the turn ends without calling the model).
TurnGate = Callable[[TurnContext, TurnSpend], "str | None"]


@dataclass(frozen=True)
class ToolFile:
    """A file a tool returned beside its text: `kind` "image" or "file" (a label), the
    bytes, a name and the type the tool claimed (the store believes only the bytes)."""

    kind: str
    name: str
    data: bytes
    declared_type: str = ""


class ToolReply(str):
    """A handler's text result that also carries files (`files`) for the tool files store,
    and notes the model should read about files that were not kept (`notes`)."""

    files: tuple[ToolFile, ...] = ()
    notes: tuple[str, ...] = ()


# (context, stored tool result message, files) -> lines for the model (e.g. why a file was
# not kept), in the turn's own thread, after the tool result is stored.
ToolFilesStore = Callable[[TurnContext, "Message", "tuple[ToolFile, ...]"], list[str]]


class ToolError(Exception):
    """Raised by a handler for a failure the model should read as is (its message is the
    tool's error result, without the generic "the tool failed" wrapping)."""


class SectionText(str):
    """A prompt section's text that also tells the turn's prompt report something about
    itself (`details`, JSON-serialisable: e.g. how many items it listed and left out)."""

    details: dict

    def __new__(cls, text: str = "", details: dict | None = None) -> "SectionText":
        section_text = super().__new__(cls, text)
        section_text.details = dict(details or {})
        return section_text


class ToolProvider(Protocol):
    """`tools()` lists the provider's fixed tools. A provider whose tools depend on the turn
    (a chat's own toolset) may also define `tools_for_turn(context) -> Iterable[Tool]`,
    which the loop calls for each turn; the registry leaves out a name already taken."""

    def tools(self) -> Iterable[Tool]: ...


class PromptSectionProvider(Protocol):
    name: str
    order: int  # lower renders first

    def render(self, context: TurnContext) -> str:
        """The section's text for this turn, or "" to leave it out; a SectionText adds its
        details to the prompt report."""
        ...


@dataclass(frozen=True)
class HistoryScope:
    """A narrower history for one turn: only the stored messages `message_ids` (those before
    the trigger, and replies to them), without the chat's summary or reset markers. The
    system prompt, the trigger and the turn's own steps are as for any turn."""

    message_ids: frozenset[int]
    reason: str = ""  # shown in the turn's prompt report, e.g. "isolated schedule #3"


# Called with the turn's context; returns a HistoryScope for a turn it narrows, else None.
# It runs before every model request of a turn: answer None cheaply for turns not yours.
HistoryScopeProvider = Callable[[TurnContext], "HistoryScope | None"]


@dataclass
class Registry:
    tool_providers: list[ToolProvider] = field(default_factory=list)
    prompt_sections: list[PromptSectionProvider] = field(default_factory=list)
    history_scopes: list[HistoryScopeProvider] = field(default_factory=list)
    turn_gates: list[TurnGate] = field(default_factory=list)
    message_parts: dict[str, MessagePartsProvider] = field(default_factory=dict)
    reply_stored: list[ReplyStoredHook] = field(default_factory=list)
    tool_files_stores: list[ToolFilesStore] = field(default_factory=list)

    def tool_files_store(
        self, context: TurnContext, message: "Message", files: "tuple[ToolFile, ...]"
    ) -> list[str]:
        """Hand a tool result's files to the store (the first registered); lines for the
        model. Without a store, or when it fails, the files are not kept and the lines say
        so: the tool's text result stands either way."""
        if not files:
            return []
        if not self.tool_files_stores:
            return [f"{len(files)} file(s) from the tool not kept: this hub stores no files."]
        try:
            return list(self.tool_files_stores[0](context, message, files))
        except Exception:  # noqa: BLE001 - the tool's text result stands without its files
            logger.exception("tool files store failed for message %s", message.pk)
            return [f"{len(files)} file(s) from the tool could not be kept (an internal error)."]

    def reply_stored_tell(self, turn: "Turn", reply: "Message | None") -> None:
        """Tell every reply-stored hook, each in a savepoint of the caller's transaction: a
        hook that fails is logged and undone alone; the reply is stored all the same."""
        for hook in self.reply_stored:
            try:
                with transaction.atomic():
                    hook(turn, reply)
            except Exception:  # noqa: BLE001 - a hook's failure must not lose the reply
                logger.exception("reply-stored hook %r failed for turn %s", hook, turn.pk)

    def history_scope_for(self, context: TurnContext) -> HistoryScope | None:
        """The first scope a provider gives this turn, or None (the chat's whole history).
        A provider that fails narrows the turn to no history at all (logged): a turn meant
        to see only some messages never falls back to seeing the whole chat."""
        for provider in self.history_scopes:
            try:
                scope = provider(context)
            except Exception:  # noqa: BLE001 - the narrowest context, never the widest
                logger.exception("history scope provider %r failed for this turn", provider)
                return HistoryScope(frozenset(), reason="history scope provider failed")
            if scope is not None:
                return scope
        return None

    def turn_refusal(self, context: TurnContext, pending: TurnSpend) -> str | None:
        """The first gate's answer that stops the turn, or None. A gate that fails is
        logged and does not stop the turn (a broken check must not take the hub down)."""
        for gate in self.turn_gates:
            try:
                answer = gate(context, pending)
            except Exception:  # noqa: BLE001 - one gate's failure must not stop every turn
                logger.exception("turn gate %r failed", gate)
                continue
            if answer:
                return answer
        return None

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

    def tools_for_turn(self, context: TurnContext) -> list[Tool]:
        """The channel's tools plus those providers give this turn (`tools_for_turn`); a
        turn tool whose name is taken is left out, never replaces a fixed tool, and a
        provider that fails is logged and left out: the turn goes on without its tools."""
        tools = {tool.name: tool for tool in self.tools_for(context.channel)}
        for provider in self.tool_providers:
            per_turn = getattr(provider, "tools_for_turn", None)
            if per_turn is None:
                continue
            try:
                offered = list(per_turn(context))
            except Exception:  # noqa: BLE001 - one provider's failure must not stop the turn
                logger.exception("tool provider %r failed for this turn", provider)
                continue
            for tool in offered:
                if tool.name not in tools and tool.allowed_on(context.channel):
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


def register_history_scope(provider: HistoryScopeProvider) -> None:
    if provider not in registry.history_scopes:
        registry.history_scopes.append(provider)


def register_turn_gate(gate: TurnGate) -> None:
    if gate not in registry.turn_gates:
        registry.turn_gates.append(gate)


def message_parts_register(name: str, provider: MessagePartsProvider) -> None:
    """Register (or replace) the message parts provider that messages name `name` under
    CARRIES_KEY in their metadata."""
    registry.message_parts[name] = provider


def register_tool_files_store(store: ToolFilesStore) -> None:
    if store not in registry.tool_files_stores:
        registry.tool_files_stores.append(store)


def register_reply_stored(hook: ReplyStoredHook) -> None:
    if hook not in registry.reply_stored:
        registry.reply_stored.append(hook)
