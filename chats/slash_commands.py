"""Slash commands that other apps add to every conversational channel (Telegram, terminal).

A command answers with plain text; each channel adapter escapes and delivers it its own
way. The handler gets who asked and where, and decides itself what that person may see
(`private_only` commands are answered only in a chat private to the asker; `uses_roles`
commands depend on who holds which role in the chat, which a channel brings up to date first
where the platform has its own roles, e.g. a Telegram group's administrators). Apps register
in `AppConfig.ready()`; `chats` never imports them.
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


@dataclass(frozen=True)
class SlashCommand:
    name: str  # without the slash
    help: str  # one line for /help
    handler: Callable[[CommandContext], str]
    private_only: bool = False
    uses_roles: bool = False


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


def slash_command(name: str) -> SlashCommand | None:
    """The registered command called `name`, or None."""
    return _commands.get(name)


def slash_commands() -> list[SlashCommand]:
    """Every registered command, by name."""
    return [_commands[name] for name in sorted(_commands)]
