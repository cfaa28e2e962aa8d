"""Reads of the tools app: a chat's active tools for a turn, and who may see what."""

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, Prefetch, Q, QuerySet

from chats.models import Chat
from chats.rows import fetch_prepared
from toolservers.models import ChatToolset, ServerTool, ToolCall, ToolServer
from toolservers.policy import may_read
from toolservers.schemas import tool_problem


@dataclass(frozen=True)
class ActiveTool:
    """One tool a chat has on, with the policy a call to it follows."""

    server: ToolServer
    tool: ServerTool
    policy: str  # allow, ask or deny
    named: bool = False  # turned on by its own row, not only server-wide (kept first)


def _effective_policy(row: ChatToolset | None, tool: ServerTool) -> str:
    """The chat's row decides, else the server's default policy, else the annotations."""
    return (
        (row.policy if row is not None else "")
        or tool.server.default_policy
        or (tool.default_policy)
    )


def chat_active_tools(chat: Chat) -> list[ActiveTool]:
    """The tools on in `chat`: its server-wide rows and per-tool rows (a tool row wins), and
    staff's team defaults where the chat has no row (a row that turns a server off wins over
    the default), on enabled servers, listed by the server's allow/deny lists, announced and
    not flagged. Nothing else is on. One query for a chat with nothing on (no row, no team
    default), two otherwise."""
    own_servers = ChatToolset.objects.filter(chat=chat).values("server_id")
    tools = list(
        ServerTool.objects.filter(present=True, server__enabled=True)
        .filter(Q(server__on_by_default=True) | Q(server_id__in=own_servers))
        .select_related("server")
        .order_by("server__slug", "name")
    )
    if not tools:  # most chats: one query per turn and no more
        return []
    by_server: dict[int, ChatToolset] = {}
    by_tool: dict[tuple[int, str], ChatToolset] = {}
    for row in ChatToolset.objects.filter(chat=chat):
        if row.tool_name:
            by_tool[(row.server_id, row.tool_name)] = row
        else:
            by_server[row.server_id] = row
    active = []
    for tool in tools:
        own = by_tool.get((tool.server_id, tool.name))
        row = own or by_server.get(tool.server_id)
        on = row.enabled if row is not None else tool.server.on_by_default
        if not on or not tool.server.tool_listed(tool.name):
            continue
        if not tool.usable:  # flagged by the scanner and not accepted as it is now
            continue
        active.append(
            ActiveTool(tool.server, tool, _effective_policy(row, tool), named=own is not None)
        )
    return active


def chat_may_have_tools(chat: Chat) -> bool:
    """False only when neither `enabled_servers_for_chat` nor `chat_active_tools` can find
    anything: no enabled server that is on by default or has a row in this chat. Asked first
    on every turn, so it is one statement written once (no queryset compiled) and always
    current: nothing is cached, so a server turned on counts from the next turn on."""
    return bool(fetch_prepared("chat_may_have_tools", _may_have_tools_sql, [True, True, chat.pk]))


def _may_have_tools_sql(quote) -> str:
    server, toolset = ToolServer._meta, ChatToolset._meta

    def column(meta, name: str) -> str:
        return f"{quote(meta.db_table)}.{quote(meta.get_field(name).column)}"

    return (
        f"SELECT 1 FROM {quote(server.db_table)} WHERE {column(server, 'enabled')} = %s "
        f"AND ({column(server, 'on_by_default')} = %s OR {column(server, 'id')} IN "
        f"(SELECT {column(toolset, 'server')} FROM {quote(toolset.db_table)} "
        f"WHERE {column(toolset, 'chat')} = %s)) LIMIT 1"
    )


def enabled_servers_for_chat(chat: Chat) -> list[ToolServer]:
    """Enabled servers with at least one enabled row in `chat`, or on by default and not
    turned off there (their tool lists may need a refresh); one query."""
    rows = ChatToolset.objects.filter(chat=chat)
    on = rows.filter(enabled=True).values("server_id")
    off = rows.filter(enabled=False, tool_name="").values("server_id")
    return list(
        ToolServer.objects.filter(enabled=True).filter(
            Q(pk__in=on) | (Q(on_by_default=True) & ~Q(pk__in=off))
        )
    )


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
    off_reason: str = ""  # why it is off whatever the chat says (e.g. "invalid schema")


@dataclass(frozen=True)
class ChatServerState:
    """One server as a chat has it: its own row (server-wide) and its tools."""

    server: ToolServer
    row: ChatToolset | None
    tools: list[ChatToolState]
    on: bool = False  # on here: by the chat's own row, else by a team default
    team_default: bool = False  # on because staff made it a team default (no row here)


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
            wanted = row.enabled if row is not None else server.on_by_default
            reason = ""
            if tool.flagged and not tool.usable:
                reason = "flagged"
            elif problem := tool_problem(tool):
                reason = problem  # the engine leaves it out of every turn
            on = bool(wanted and server.enabled and server.tool_listed(tool.name) and not reason)
            policy = _effective_policy(row, tool)
            tools.append(ChatToolState(tool=tool, row=own, on=on, policy=policy, off_reason=reason))
        on_here = server_row.enabled if server_row is not None else server.on_by_default
        shown.append(
            ChatServerState(
                server=server,
                row=server_row,
                tools=tools,
                on=on_here,
                team_default=server_row is None and server.on_by_default,
            )
        )
    return shown
