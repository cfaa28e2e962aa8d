"""Reads of the tools app: a chat's active tools for a turn, and who may see what."""

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, Prefetch, QuerySet

from chats.models import Chat
from toolservers.models import ChatToolset, ServerTool, ToolCall, ToolServer
from toolservers.policy import may_read


@dataclass(frozen=True)
class ActiveTool:
    """One tool a chat has on, with the policy a call to it follows."""

    server: ToolServer
    tool: ServerTool
    policy: str  # allow, ask or deny
    named: bool = False  # turned on by its own row, not only server-wide (kept first)


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
        own = by_tool.get((tool.server_id, tool.name))
        row = own or by_server.get(tool.server_id)
        if row is None or not row.enabled or not tool.server.tool_listed(tool.name):
            continue
        if not tool.usable:  # flagged by the scanner and not accepted as it is now
            continue
        active.append(
            ActiveTool(tool.server, tool, row.policy or tool.default_policy, named=own is not None)
        )
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


# Latency is the median of the newest calls of the day; a busy server's older calls add
# nothing a person reads off a dashboard, and the read stays bounded.
LATENCY_SAMPLE = 2000


@dataclass(frozen=True)
class ServerOverview:
    """One server as the staff Tools page shows it."""

    server: ToolServer
    connected: bool  # this process holds an open session to it now
    tools: list[ServerTool]
    calls_today: int
    p50_ms: int | None
    last_call: ToolCall | None


def _median(values: list[int]) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return round((ordered[middle - 1] + ordered[middle]) / 2)


def servers_overview(*, since, is_connected) -> list[ServerOverview]:
    """Every server with its announced tools, its calls since `since` (count and median
    duration) and its last audited call: four queries whatever the number of servers.
    `is_connected(slug)` answers from memory (the runtime), never over the network."""
    servers_list = list(
        ToolServer.objects.prefetch_related(
            Prefetch("tools", queryset=ServerTool.objects.filter(present=True).order_by("name"))
        )
    )
    ids = [server.pk for server in servers_list]
    today = ToolCall.objects.filter(server_id__in=ids, created_at__gte=since)
    counts = dict(
        today.order_by().values("server_id").annotate(n=Count("id")).values_list("server_id", "n")
    )
    durations: dict[int, list[int]] = {}
    allowed = today.filter(decision=ToolCall.Decision.ALLOWED).values_list(
        "server_id", "duration_ms"
    )
    for server_id, duration in allowed[:LATENCY_SAMPLE]:
        durations.setdefault(server_id, []).append(duration)
    last: dict[int, ToolCall] = {}
    # The newest call per server, newest first; one row each (DISTINCT ON is Postgres
    # only, so the latest ids are found with one grouped query and read with the next).
    latest_ids = (
        ToolCall.objects.filter(server_id__in=ids)
        .order_by()
        .values("server_id")
        .annotate(newest=Max("id"))
        .values_list("newest", flat=True)
    )
    for call in ToolCall.objects.filter(pk__in=latest_ids):
        last[call.server_id] = call
    return [
        ServerOverview(
            server=server,
            connected=is_connected(server.slug),
            tools=list(server.tools.all()),
            calls_today=counts.get(server.pk, 0),
            p50_ms=_median(durations.get(server.pk, [])),
            last_call=last.get(server.pk),
        )
        for server in servers_list
    ]


@dataclass(frozen=True)
class ChatToolState:
    """One announced tool as a chat has it: on or off, its policy and why."""

    tool: ServerTool
    row: ChatToolset | None  # the tool's own row in the chat, if any
    on: bool
    policy: str  # allow, ask or deny: the one a call would follow


@dataclass(frozen=True)
class ChatServerState:
    """One server as a chat has it: its own row (server-wide) and its tools."""

    server: ToolServer
    row: ChatToolset | None
    tools: list[ChatToolState]


def chat_toolset_panel(*, chat: Chat, person) -> list[ChatServerState]:
    """Every server and its announced tools as `chat` has them (the same rules as
    `chat_active_tools`), for the chat's members and staff only; constant query count."""
    if not may_read(chat, person):
        raise PermissionDenied("you are not a member of this chat")
    rows = list(ChatToolset.objects.filter(chat=chat))
    by_server = {row.server_id: row for row in rows if not row.tool_name}
    by_tool = {(row.server_id, row.tool_name): row for row in rows if row.tool_name}
    shown = []
    for server in ToolServer.objects.prefetch_related(
        Prefetch("tools", queryset=ServerTool.objects.filter(present=True).order_by("name"))
    ):
        server_row = by_server.get(server.pk)
        tools = []
        for tool in server.tools.all():
            own = by_tool.get((server.pk, tool.name))
            row = own or server_row
            on = bool(
                row is not None
                and row.enabled
                and server.enabled
                and server.tool_listed(tool.name)
                and tool.usable
            )
            policy = (row.policy if row is not None else "") or tool.default_policy
            tools.append(ChatToolState(tool=tool, row=own, on=on, policy=policy))
        shown.append(ChatServerState(server=server, row=server_row, tools=tools))
    return shown
