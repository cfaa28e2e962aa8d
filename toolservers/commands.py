"""`/tools` on every conversational channel: the tool servers and tools on in this chat with
their policy (anyone who may talk to the agent there may ask), and `/tools on SERVER
[allow|ask|deny]` / `/tools off SERVER`, which change the chat's toolset for its deciders only
(`toolservers.policy.may_decide`; a Telegram account counts only through its linked Person;
in a Telegram group the bridge reads the group's administrators first, `bots.group_admins`)."""

from django.core.exceptions import PermissionDenied, ValidationError

from chats.slash_commands import CommandContext, SlashCommand
from toolservers.models import ChatToolset, Policy, ToolServer
from toolservers.policy import may_decide
from toolservers.selectors import chat_active_tools
from toolservers.services import toolset_set

MAX_TOOLS_PER_SERVER = 20
USAGE = "Usage: /tools, /tools on SERVER [allow|ask|deny], /tools off SERVER"
REFUSED = (
    "Only this chat's deciders (you alone in your own chat, its owners and admins, or staff) "
    "turn tool servers on or off here; nothing changed."
)


def _listing(chat) -> str:
    rows = {
        row.server_id: row
        for row in ChatToolset.objects.filter(chat=chat, tool_name="").select_related("server")
    }
    by_server: dict[str, list[str]] = {}
    for active in chat_active_tools(chat):
        by_server.setdefault(active.server.slug, []).append(f"{active.tool.name} ({active.policy})")
    heads: dict[str, str] = {}
    for row in rows.values():
        if row.enabled and row.server.enabled:
            heads[row.server.slug] = row.policy or "default"
    for server in ToolServer.objects.filter(enabled=True, on_by_default=True):
        if server.pk not in rows:
            heads[server.slug] = f"team default, {server.default_policy or 'default'}"
    slugs = sorted(set(heads) | set(by_server))
    if not slugs:
        return "No tool server is on in this chat."
    lines = []
    for slug in slugs:
        tools = by_server.get(slug, [])
        head = f"• {slug} ({heads.get(slug, 'some tools')})"
        if not tools:
            lines.append(f"{head}: no usable tool listed yet")
            continue
        shown = ", ".join(tools[:MAX_TOOLS_PER_SERVER])
        hidden = len(tools) - MAX_TOOLS_PER_SERVER
        more = f" … and {hidden} more" if hidden > 0 else ""
        lines.append(f"{head}: {shown}{more}")
    return "Tools on in this chat:\n" + "\n".join(lines)


def tools_command(context: CommandContext) -> str:
    """The chat's tools as plain text; `on`/`off` change the toolset for deciders only and
    leave it untouched (with a clear answer) for everyone else."""
    if context.chat is None:
        return "There is no chat here to list tools for."
    words = context.args.split()
    if not words:
        return _listing(context.chat)
    verb = words[0].lower()
    if verb not in ("on", "off") or len(words) < 2 or len(words) > (3 if verb == "on" else 2):
        return USAGE
    policy = words[2].lower() if len(words) == 3 else Policy.DEFAULT
    if policy not in Policy.values:
        return USAGE
    if not may_decide(context.chat, context.person):
        return REFUSED
    server = ToolServer.objects.filter(slug=words[1].lower()).first()
    if server is None:
        return f"No tool server is called “{words[1]}”."
    try:
        toolset_set(
            by=context.person,
            chat=context.chat,
            server=server,
            policy=policy,
            enabled=verb == "on",
            via=context.channel[:16],
        )
    except (PermissionDenied, ValidationError):
        return REFUSED
    if verb == "off":
        return f"{server.slug} is off in this chat."
    return f"{server.slug} is on in this chat ({policy or 'each tool by its default policy'})."


tools_slash_command = SlashCommand(
    name="tools",
    help="The tool servers on here (/tools on|off SERVER to change)",
    handler=tools_command,
    uses_roles=True,  # on Telegram, a group's administrators are read first
)
