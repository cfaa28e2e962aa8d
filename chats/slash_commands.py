"""Slash commands that other apps add to every conversational channel (Telegram, terminal).

A command answers with plain text; each channel adapter escapes and delivers it its own
way. The handler gets who asked and where, and decides itself what that person may see
(`private_only` commands are answered only in a chat private to the asker; `uses_roles`
commands depend on who holds which role in the chat, which a channel brings up to date first
where the platform has its own roles, e.g. a Telegram group's administrators; `channels`
commands exist only on the channels named, e.g. the terminal's `/attach PATH`). A channel
that keeps a session for the person (the terminal) hands its `session` dict to every
command, so a command can stage something for the next message (chats.staged). Apps
register in `AppConfig.ready()`; `chats` never imports them.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chats.models import Actor, Chat


@dataclass(frozen=True)
class CommandContext:
    channel: str
    chat: Chat | None
    actor: Actor | None
    person: Any  # the Person behind the actor, or None
    args: str = ""
    is_private: bool = False
    # The channel's scratch space for this person's session (the terminal's), kept until
    # it ends; None where a channel keeps none.
    session: dict | None = None


@dataclass(frozen=True)
class SlashCommand:
    name: str  # without the slash
    help: str  # one line for /help
    handler: Callable[[CommandContext], str]
    private_only: bool = False
    uses_roles: bool = False
    channels: tuple[str, ...] = ()  # the channels it exists on; () is every channel


_commands: dict[str, SlashCommand] = {}
# What Telegram accepts as a command (and so what every channel can offer alike).
NAME_RE = re.compile(r"^[a-z0-9_]{1,32}$")


def register_slash_command(command: SlashCommand) -> None:
    """Add (or replace, by name) a command on every conversational channel; a name Telegram
    would refuse, or a command without help, is a programming error (ValueError)."""
    if not NAME_RE.match(command.name):
        raise ValueError(f"a slash command name is 1-32 of a-z, 0-9 and _: {command.name!r}")
    if not command.help.strip():
        raise ValueError(f"the slash command /{command.name} needs a line of help")
    _commands[command.name] = command


def _on(command: SlashCommand, channel: str | None) -> bool:
    return channel is None or not command.channels or channel in command.channels


def slash_command(name: str, channel: str | None = None) -> SlashCommand | None:
    """The registered command called `name` (on `channel`, when given), or None."""
    command = _commands.get(name)
    return command if command is not None and _on(command, channel) else None


def slash_commands(channel: str | None = None) -> list[SlashCommand]:
    """Every registered command (on `channel`, when given), by name."""
    return [_commands[name] for name in sorted(_commands) if _on(_commands[name], channel)]
