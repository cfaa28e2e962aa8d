"""Reads of the tools app: a chat's active tools for a turn, and who may see what."""

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from chats.models import Chat
from toolservers.models import ChatToolset, ServerTool, ToolCall, ToolServer
from toolservers.policy import may_read


@dataclass(frozen=True)
class ActiveTool:
    """One tool a chat has on, with the policy a call to it follows."""

    server: ToolServer
    tool: ServerTool
    policy: str  # allow, ask or deny


def chat_active_tools(chat: Chat) -> list[ActiveTool]:
    """The tools on in `chat`: its server-wide rows and per-tool rows (a tool row wins),
    on enabled servers, listed by the server's allow/deny lists, announced and not flagged.
    Nothing is on in a chat without a row."""
    rows = list(
        ChatToolset.objects.filter(chat=chat, server__enabled=True).select_related("server")
    )
    if not rows:  # most chats: one query per turn and no more
        return []
    by_server: dict[int, ChatToolset] = {}
    by_tool: dict[tuple[int, str], ChatToolset] = {}
    for row in rows:
        if row.tool_name:
            by_tool[(row.server_id, row.tool_name)] = row
        else:
            by_server[row.server_id] = row
    server_ids = {row.server_id for row in rows}
    active = []
    tools = ServerTool.objects.filter(server_id__in=server_ids, present=True)
    for tool in tools.select_related("server").order_by("server__slug", "name"):
        row = by_tool.get((tool.server_id, tool.name)) or by_server.get(tool.server_id)
        if row is None or not row.enabled or not tool.server.tool_listed(tool.name):
            continue
        if not tool.usable:  # flagged by the scanner and not accepted as it is now
            continue
        active.append(ActiveTool(tool.server, tool, row.policy or tool.default_policy))
    return active


def enabled_servers_for_chat(chat: Chat) -> list[ToolServer]:
    """Servers with at least one enabled row in `chat` (their tool lists may need a refresh)."""
    ids = ChatToolset.objects.filter(chat=chat, enabled=True, server__enabled=True).values(
        "server_id"
    )
    return list(ToolServer.objects.filter(pk__in=ids))


def chat_toolset(*, chat: Chat, person) -> list[ChatToolset]:
    """What is on in `chat`, for its members and staff only."""
    if not may_read(chat, person):
        raise PermissionDenied("you are not a member of this chat")
    return list(ChatToolset.objects.filter(chat=chat).select_related("server"))


def chat_tool_calls(*, chat: Chat, person, limit: int = 50) -> QuerySet[ToolCall]:
    """The audit of `chat`'s tool calls, for its members and staff only."""
    if not may_read(chat, person):
        raise PermissionDenied("you are not a member of this chat")
    return ToolCall.objects.filter(chat=chat)[: max(1, min(limit, 500))]


def servers() -> QuerySet[ToolServer]:
    return ToolServer.objects.all()
