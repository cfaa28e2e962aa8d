"""Whether tools a skill names are available in a chat: on, needing approval, off, or not
on this hub at all.

A skill names tools as the model sees them (`metadata.hermes.requires_tools`:
`<server>__<tool>` for a tool server's tool, a bare name for a built-in tool) and tool
servers as toolsets (`requires_toolsets`: server slugs). This module answers for one chat
from what `toolservers.selectors.chat_active_tools` says is on there, in a few queries
whatever the number of names. `tool_availability` is for the turn's own chat (the engine
and the skills tools); `tool_availability_for` is for a person, who must be allowed to read
the chat (`toolservers.policy.may_read`), else PermissionDenied.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied

from chats.agent.registry import registry
from chats.models import Chat
from toolservers.models import Policy, ServerTool, ToolServer
from toolservers.policy import may_read
from toolservers.selectors import chat_active_tools

ON = "on"
ASK = "ask"  # on, but each call waits for a decider's approval
OFF = "off"  # this hub has it; this chat does not have it on
MISSING = "missing"  # nothing of that name on this hub
NAME_LIMIT = 64  # as toolservers.provider names functions
SEPARATOR = "__"

LABELS = {
    ON: "on",
    ASK: "needs approval",
    OFF: "off",
    MISSING: "not on this hub",
}


@dataclass(frozen=True)
class ToolAvailability:
    """One name a skill gave, as the chat has it."""

    name: str
    kind: str  # "tool" or "toolset"
    state: str  # ON, ASK, OFF or MISSING
    why: str = ""  # for OFF: what keeps it off ("not turned on here", "denied here", …)

    @property
    def available(self) -> bool:
        """Can the model call it in this chat (at once or after approval)?"""
        return self.state in (ON, ASK)

    @property
    def label(self) -> str:
        return LABELS[self.state] + (f" ({self.why})" if self.why else "")


def function_name(server_slug: str, tool_name: str) -> str:
    """The name the model sees for a server's tool (before any collision suffix)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server_slug}{SEPARATOR}{tool_name}")[:NAME_LIMIT]


def _candidate_slugs(names: Iterable[str]) -> set[str]:
    """Every server slug a `<server>__<tool>` name could start with (a slug may hold `__`)."""
    slugs = set()
    for name in names:
        start = name.find(SEPARATOR)
        while start > 0:
            slugs.add(name[:start])
            start = name.find(SEPARATOR, start + 1)
    return slugs


def _builtin_names(chat: Chat) -> set[str]:
    return {tool.name for tool in registry.tools_for(chat.channel)}


def _why_off(tool: ServerTool) -> str:
    if not tool.server.enabled:
        return "its server is disabled on this hub"
    if not tool.server.tool_listed(tool.name):
        return "its server's allow/deny list leaves it out"
    if not tool.usable:
        return "flagged by the scanner"
    return "not turned on in this chat"


def tool_availability(
    chat: Chat, *, tools: Iterable[str] = (), toolsets: Iterable[str] = ()
) -> list[ToolAvailability]:
    """Each named tool and toolset as `chat` has it, in the order given. No permission
    check: for the turn's own chat (callers that show it to a person use
    `tool_availability_for`)."""
    tools, toolsets = list(dict.fromkeys(tools)), list(dict.fromkeys(toolsets))
    if not tools and not toolsets:
        return []
    active = {(item.server.pk, item.tool.name): item.policy for item in chat_active_tools(chat)}
    slugs = _candidate_slugs(tools) | set(toolsets)
    known = {}  # function name -> ServerTool (present ones win over absent ones)
    by_server: dict[str, list[ServerTool]] = {}
    servers: dict[str, ToolServer] = {}
    if slugs:
        rows = ServerTool.objects.filter(server__slug__in=slugs).select_related("server")
        for tool in rows.order_by("present", "pk"):
            known[function_name(tool.server.slug, tool.name)] = tool
            if tool.present:
                by_server.setdefault(tool.server.slug, []).append(tool)
        servers = {server.slug: server for server in ToolServer.objects.filter(slug__in=toolsets)}
    builtin = None
    answers = []
    for name in tools:
        tool = known.get(name)
        if tool is None or not tool.present:
            if SEPARATOR not in name:
                builtin = _builtin_names(chat) if builtin is None else builtin
                if name in builtin:
                    answers.append(ToolAvailability(name, "tool", ON, "built in"))
                    continue
            answers.append(ToolAvailability(name, "tool", MISSING))
            continue
        policy = active.get((tool.server.pk, tool.name))
        answers.append(_state(name, "tool", policy, tool))
    for slug in toolsets:
        if slug not in servers:
            builtin = _builtin_names(chat) if builtin is None else builtin
            if any(name == slug or name.startswith(f"{slug}_") for name in builtin):
                answers.append(ToolAvailability(slug, "toolset", ON, "built in"))
            else:
                answers.append(ToolAvailability(slug, "toolset", MISSING))
            continue
        policies = [active.get((tool.server.pk, tool.name)) for tool in by_server.get(slug, [])]
        if Policy.ALLOW in policies:
            answers.append(ToolAvailability(slug, "toolset", ON))
        elif Policy.ASK in policies:
            answers.append(ToolAvailability(slug, "toolset", ASK))
        elif not servers[slug].enabled:
            answers.append(ToolAvailability(slug, "toolset", OFF, "disabled on this hub"))
        else:
            answers.append(ToolAvailability(slug, "toolset", OFF, "not turned on in this chat"))
    return answers


def available_names(
    chat: Chat, *, tools: Iterable[str] = (), toolsets: Iterable[str] = ()
) -> set[tuple[str, str]]:
    """("tool" | "toolset", name) of the given names the model can call in `chat` (on, or
    on after approval): what `tool_availability` calls available, read from the chat's
    active tools alone (one query for a chat with nothing on, two otherwise), for the
    prompt index, which needs no reasons."""
    tools, toolsets = set(tools), set(toolsets)
    found = set()
    for item in chat_active_tools(chat) if (tools or toolsets) else ():
        if item.policy not in (Policy.ALLOW, Policy.ASK):
            continue
        name = function_name(item.server.slug, item.tool.name)
        if name in tools:
            found.add(("tool", name))
        if item.server.slug in toolsets:
            found.add(("toolset", item.server.slug))
    bare = {name for name in tools if SEPARATOR not in name}
    if bare or toolsets - {name for _, name in found}:
        builtin = _builtin_names(chat)
        found |= {("tool", name) for name in bare & builtin}
        found |= {
            ("toolset", slug)
            for slug in toolsets
            if any(name == slug or name.startswith(f"{slug}_") for name in builtin)
        }
    return found


def _state(name: str, kind: str, policy: str | None, tool: ServerTool) -> ToolAvailability:
    if policy == Policy.ALLOW:
        return ToolAvailability(name, kind, ON)
    if policy == Policy.ASK:
        return ToolAvailability(name, kind, ASK)
    if policy == Policy.DENY:
        return ToolAvailability(name, kind, OFF, "denied in this chat")
    return ToolAvailability(name, kind, OFF, _why_off(tool))


def tool_availability_for(
    *, chat: Chat, person, tools: Iterable[str] = (), toolsets: Iterable[str] = ()
) -> list[ToolAvailability]:
    """`tool_availability` shown to `person`: only for a chat they may read (its members
    and staff), else PermissionDenied."""
    if not may_read(chat, person):
        raise PermissionDenied("you are not a member of this chat")
    return tool_availability(chat, tools=tools, toolsets=toolsets)


def tool_availability_by_key(
    *, chat_key: str, person, tools: Iterable[str] = (), toolsets: Iterable[str] = ()
) -> tuple[Chat, list[ToolAvailability]]:
    """The chat `chat_key` names and `tool_availability_for` it; PermissionDenied alike for
    a key that names no chat and for a chat `person` may not read (nobody learns which)."""
    chat = Chat.objects.filter(chat_key=chat_key).first()
    if chat is None:
        raise PermissionDenied("you are not a member of this chat")
    return chat, tool_availability_for(chat=chat, person=person, tools=tools, toolsets=toolsets)
