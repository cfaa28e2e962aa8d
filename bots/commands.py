"""Slash commands other apps register (`chats.slash_commands`), answered on Telegram.

The bridge's own commands (`COMMANDS`, answered by `bots.builtin_commands`) come first; a
registered command with the same name is not reachable here. A command passes the same gates
as a message (the allow-list or pairing in private chats, TELEGRAM_ALLOWED_CHATS in groups)
before it gets here, and like the built-ins it is answered without entering the history: nothing is
stored, no turn runs. The handler's plain text is HTML-escaped and split into messages
Telegram accepts. A `private_only` command asked in a group is answered with a pointer to
the private chat, never with its content.
"""

import html
import logging

from django.contrib.auth import get_user_model
from django.db import transaction
from telegram import Message as TgMessage

from bots.outbox import UpdateOutcome, notice
from bots.telegram_format import TELEGRAM_LIMIT, split_for_telegram
from bots.updates import Command, Place
from chats.keys import make_chat_key
from chats.models import Actor, Channel, Chat
from chats.slash_commands import (
    NAME_RE,
    CommandContext,
    SlashCommand,
    slash_command,
    slash_commands,
)

logger = logging.getLogger(__name__)

# Telegram's rules for a command in the menu (setMyCommands): the name is NAME_RE, which
# registration enforces too; the description's length and the number of commands.
MENU_DESCRIPTION_CHARS = 256
MENU_MAX = 100
MAX_PARTS = 5  # messages of one answer at most; the rest is cut with a note

# The bridge's own commands and their help line.
COMMANDS = {
    "start": "Say hello and see what I can do",
    "new": "Start a fresh context (the history is kept)",
    "stop": "Stop the reply I am writing",
    "memory": "What I remember about you",
    "link": "Link this Telegram account to your dashboard login: /link CODE",
    "help": "List the commands",
}


def _builtins() -> dict[str, str]:
    return COMMANDS


def registry_command(name: str) -> SlashCommand | None:
    """The registered command `name` the bridge answers (None for built-ins and unknowns)."""
    if name in _builtins():
        return None
    return slash_command(name, "telegram")


def command_list() -> list[tuple[str, str]]:
    """Every command the bridge answers, built-ins first, as (name, one line of help)."""
    builtins = _builtins()
    commands = [(name, text) for name, text in builtins.items() if name != "help"]
    commands += [(c.name, c.help) for c in slash_commands("telegram") if c.name not in builtins]
    if "help" in builtins:
        commands.append(("help", builtins["help"]))
    return commands


def command_menu() -> list[tuple[str, str]]:
    """The commands for Telegram's menu (setMyCommands): those whose name and description
    Telegram accepts, at most 100."""
    menu = []
    for name, text in command_list():
        description = " ".join(text.split())[:MENU_DESCRIPTION_CHARS]
        if NAME_RE.match(name) and description:
            menu.append((name, description))
    return menu[:MENU_MAX]


def answer_parts(text: str) -> list[str]:
    """A handler's plain text as escaped Telegram HTML parts, each within the limit."""
    parts = split_for_telegram(text or "", TELEGRAM_LIMIT)
    if len(parts) > MAX_PARTS:
        parts = [*parts[:MAX_PARTS], "… (the rest is cut: the answer is too long for Telegram)"]
    return [html.escape(part, quote=False) for part in parts if part.strip()]


def _existing_chat(place: Place) -> Chat | None:
    key = make_chat_key(Channel.TELEGRAM, place.telegram_chat_id, place.thread_id)
    return Chat.objects.filter(chat_key=key).first()


def registry_command_apply(
    place: Place, message: TgMessage, command: Command, actor: Actor | None, *, roles_note: str = ""
):
    """Answer a registered command where it was asked (in the caller's transaction);
    `roles_note` (why the roles may be stale) is added to the answer."""
    registered = registry_command(command.name)
    if registered is None:
        return UpdateOutcome("ignored:command")
    result = f"command:{registered.name}"
    if registered.private_only and not place.is_private:
        text = f"Ask me /{html.escape(registered.name)} in a private chat."
        return UpdateOutcome(result, outbound=[notice(place, message, text)])
    # The person as stored now: an unlinked or deactivated login counts as nobody.
    person = None
    if actor is not None and actor.person_id is not None:
        person = get_user_model().objects.filter(pk=actor.person_id, is_active=True).first()
    context = CommandContext(
        channel=Channel.TELEGRAM,
        chat=_existing_chat(place),
        actor=actor,
        person=person,
        args=command.args,
        is_private=place.is_private,
    )
    try:
        with transaction.atomic():  # a failing handler must not spoil the update's claim
            answer = registered.handler(context)
    except Exception:  # noqa: BLE001 - one broken command must not block the bot
        logger.exception("slash command /%s failed", registered.name)
        text = f"/{html.escape(registered.name)} failed; the error is in the hub's log."
        return UpdateOutcome(f"{result}:failed", outbound=[notice(place, message, text)])
    answer = str(answer or "")
    if roles_note:
        answer = f"{answer}\n\n{roles_note}" if answer else roles_note
    parts = answer_parts(answer) or ["(nothing to show)"]
    return UpdateOutcome(result, outbound=[notice(place, message, part) for part in parts])
