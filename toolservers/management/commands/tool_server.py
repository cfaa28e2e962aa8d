"""manage.py tool_server add|list|enable|default|accept: set up tool servers (MCP).

Runs through the same services as the dashboard, as the operator at the shell (who may do
everything, as with import_skills); every write leaves its audit row.
"""

import shlex

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from chats.models import Chat
from toolservers.models import Policy, ServerTool, Transport
from toolservers.provider import refresh_server_tools
from toolservers.runtime import ToolServerError
from toolservers.selectors import servers
from toolservers.services import (
    VIA_COMMAND,
    server_add,
    server_set_default,
    server_tool_accept,
    toolset_set,
)


class Command(BaseCommand):
    help = (
        "Manage tool servers (MCP). `add NAME --stdio 'COMMAND ARGS' | --url URL` adds one "
        "and lists its tools; `list` shows every server and its tools; `enable NAME --chat "
        "CHAT_KEY [--policy allow|ask|deny] [--tool TOOL]` turns it on in one chat; `default NAME "
        "on|off [--policy allow|ask|deny]` makes it a team default (on in every chat that did "
        "not turn it off) or not; `accept NAME TOOL` accepts a flagged, new or changed tool "
        "as it is now, knowingly."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="add a server")
        add.add_argument("name")
        where = add.add_mutually_exclusive_group(required=True)
        where.add_argument("--stdio", help='the command line, e.g. "python -m mcp_server_time"')
        where.add_argument("--url", help="a streamable-HTTP endpoint")
        add.add_argument("--cwd", default="")
        add.add_argument(
            "--env",
            action="append",
            default=[],
            metavar="NAME=VALUE|NAME=@HUB_VAR",
            help="a variable for the child; @HUB_VAR refers to the hub's own variable",
        )
        add.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
        add.add_argument("--no-list", action="store_true", help="do not connect to list tools")
        sub.add_parser("list", help="list servers and their tools")
        enable = sub.add_parser("enable", help="turn a server (or one tool) on in a chat")
        enable.add_argument("name")
        enable.add_argument("--chat", required=True, dest="chat_key")
        enable.add_argument("--tool", default="")
        enable.add_argument("--policy", choices=["allow", "ask", "deny"], default="")
        enable.add_argument("--off", action="store_true", help="turn it off instead")
        default = sub.add_parser(
            "default", help="make a server a team default: on in every chat unless turned off"
        )
        default.add_argument("name")
        default.add_argument("state", choices=["on", "off"])
        default.add_argument(
            "--policy",
            choices=["allow", "ask", "deny"],
            default="",
            help="what a call follows where a chat sets no policy (default: the annotations)",
        )
        accept = sub.add_parser(
            "accept",
            help="accept a flagged, new or changed tool as it is now, knowingly (its "
            "annotations give its policy again)",
        )
        accept.add_argument("name")
        accept.add_argument("tool")

    def handle(self, *args, action: str, **options):
        """Run one action; bad input is a CommandError with the reason, nothing stored."""
        try:
            getattr(self, f"_{action}")(**options)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc

    def _add(self, *, name, stdio, url, cwd, env, timeout, no_list, **_):
        variables = {}
        for item in env:
            key, sep, value = item.partition("=")
            if not sep:
                raise CommandError(f"--env {item!r}: expected NAME=VALUE or NAME=@HUB_VAR")
            variables[key] = {"env": value[1:]} if value.startswith("@") else value
        if stdio:
            words = shlex.split(stdio)
            if not words:
                raise CommandError("--stdio needs a command")
            transport, command, arguments = Transport.STDIO, words[0], words[1:]
        else:
            transport, command, arguments = Transport.HTTP, "", []
        if servers().filter(slug=name).exists():
            raise CommandError(f"a tool server named {name!r} exists already")
        server = server_add(
            by=None,
            via=VIA_COMMAND,
            slug=name,
            transport=transport,
            command=command,
            args=arguments,
            cwd=cwd,
            env=variables,
            url=url or "",
            call_timeout_seconds=timeout,
        )
        self.stdout.write(f"added {server.slug} ({server.transport})")
        if no_list:
            return
        try:
            tools = refresh_server_tools(server)
        except ToolServerError as exc:
            self.stderr.write(f"could not list its tools yet: {exc}")
            return
        for tool in tools:
            self.stdout.write(self._tool_line(tool))

    def _list(self, **_):
        for server in servers():
            where = server.url or shlex.join([server.command, *server.args])
            state = "enabled" if server.enabled else "disabled"
            if server.on_by_default:
                state += f", team default ({server.default_policy or 'default'})"
            self.stdout.write(f"{server.slug}\t{server.transport}\t{state}\t{where}")
            if server.last_error:
                self.stdout.write(f"  last error: {server.last_error}")
            for tool in ServerTool.objects.filter(server=server, present=True):
                self.stdout.write(self._tool_line(tool))

    def _enable(self, *, name, chat_key, tool, policy, off, **_):
        server = servers().filter(slug=name).first()
        if server is None:
            raise CommandError(f"no tool server named {name!r}")
        chat = Chat.objects.filter(chat_key=chat_key).first()
        if chat is None:
            raise CommandError(f"no chat with key {chat_key!r}")
        toolset_set(
            by=None,
            via=VIA_COMMAND,
            chat=chat,
            server=server,
            tool_name=tool,
            policy=policy or Policy.DEFAULT,
            enabled=not off,
        )
        target = f"{name}/{tool}" if tool else name
        state = "off" if off else f"on ({policy or 'policy from annotations'})"
        self.stdout.write(f"{target} is {state} in {chat_key}")

    def _default(self, *, name, state, policy, **_):
        server = servers().filter(slug=name).first()
        if server is None:
            raise CommandError(f"no tool server named {name!r}")
        server_set_default(
            by=None, via=VIA_COMMAND, server=server, on=state == "on", policy=policy or ""
        )
        if state == "on":
            how = policy or "policy from annotations"
            self.stdout.write(f"{name} is a team default ({how}): on in every chat not turned off")
        else:
            self.stdout.write(f"{name} is no team default: on only where a chat turned it on")

    def _accept(self, *, name, tool, **_):
        found = ServerTool.objects.filter(server__slug=name, name=tool).first()
        if found is None:
            raise CommandError(f"no tool {tool!r} on a server named {name!r}")
        if found.accepted:
            raise CommandError(f"{name}/{tool} is accepted as it is; nothing to accept")
        if found.flagged:
            self.stdout.write(f"findings: {found.scan_summary}")
        else:
            self.stdout.write(f"{found.change_note or 'changed'}: {found.annotations or {}}")
        server_tool_accept(by=None, via=VIA_COMMAND, tool=found, shown_hash=found.schema_hash)
        self.stdout.write(
            f"{name}/{tool} accepted as it is now (policy from its annotations: "
            f"{found.annotations_policy})"
        )

    @staticmethod
    def _tool_line(tool: ServerTool) -> str:
        flag = ""
        if tool.flagged:
            state = "accepted by staff" if tool.usable else "stays off"
            flag = f"  FLAGGED, {state}: {tool.scan_summary}"
        elif not tool.accepted:
            flag = f"  NOT ACCEPTED ({tool.change_note or 'changed'}): asks until accepted"
        return f"  {tool.name}\t{tool.default_policy}{flag}"
