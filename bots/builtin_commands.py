"""The bridge's own commands (`bots.commands.COMMANDS`): /start, /help, /new, /stop,
/memory and /link, answered where they were asked without entering the history."""

import html

from django.conf import settings
from telegram import Message as TgMessage

from bots.commands import command_list
from bots.outbox import UpdateOutcome, notice
from bots.pairing import telegram_link
from bots.updates import Place, display_name
from chats.agent.holds import chat_stop
from chats.models import Actor, Channel, Chat
from chats.services import chat_get_or_create, chat_reset

STOP_REASON = "stopped from Telegram"


def _chat_of(place: Place) -> Chat:
    chat, _ = chat_get_or_create(
        channel=Channel.TELEGRAM,
        chat_id=place.telegram_chat_id,
        thread_id=place.thread_id,
        kind=place.kind,
        title=place.title,
    )
    return chat


def builtin_command_apply(
    place: Place, message: TgMessage, command, actor: Actor | None
) -> UpdateOutcome:
    """Answer one of `COMMANDS` (in the caller's transaction)."""
    name = command.name
    if name in ("start", "help"):
        lines = [f"/{cmd} – {html.escape(text)}" for cmd, text in command_list()]
        intro = (
            f"Hi {html.escape(display_name(message.from_user))}! I'm {settings.AGENT_NAME}."
            if name == "start"
            else "Commands:"
        )
        if not place.is_private and name == "start":
            intro += " In this group I answer when you mention me or reply to me."
        return UpdateOutcome(
            "command:" + name, outbound=[notice(place, message, intro + "\n\n" + "\n".join(lines))]
        )
    if name == "new":
        chat = _chat_of(place)
        chat_reset(chat=chat, actor=actor)
        text = (
            "Fresh start: I will not use the earlier messages as context "
            "(they stay in the history)."
        )
        return UpdateOutcome("command:new", outbound=[notice(place, message, text)])
    if name == "stop":
        chat = _chat_of(place)
        # Held messages (waiting for their files) first, then every open turn.
        reason = f"{STOP_REASON} by {display_name(message.from_user)}"
        stopped = chat_stop(chat=chat, reason=reason)
        text = "Stopped." if stopped else "Nothing to stop: I am not writing anything."
        return UpdateOutcome("command:stop", outbound=[notice(place, message, text)])
    if name == "memory":
        return _command_memory(place, message, actor)
    if name == "link":
        return command_link(place, message, actor, command.args)
    return UpdateOutcome("ignored:command")


def _command_memory(place: Place, message: TgMessage, actor: Actor | None) -> UpdateOutcome:
    if not place.is_private:
        text = "Ask me /memory in a private chat: what I remember about you is yours."
        return UpdateOutcome("command:memory", outbound=[notice(place, message, text)])
    from memory.selectors import memory_entries_about

    entries = memory_entries_about(person=actor.person if actor else None, actor=actor)
    if not entries:
        text = "I do not remember anything about you yet."
    else:
        lines = []
        for entry in entries:
            mark = " <i>(waiting for your approval)</i>" if entry.status == "pending" else ""
            lines.append(f"• {html.escape(entry.summary_line())}{mark}")
        text = "What I remember about you:\n\n" + "\n".join(lines)
    return UpdateOutcome("command:memory", outbound=[notice(place, message, text)])


def command_link(place: Place, message: TgMessage, actor: Actor | None, code: str):
    if not place.is_private:
        text = "Send /link CODE in a private chat with me, never in a group."
        return UpdateOutcome("command:link", outbound=[notice(place, message, text)])
    if actor is None or not code:
        text = "Create a code on the dashboard (Telegram page), then send /link CODE here."
        return UpdateOutcome("command:link", outbound=[notice(place, message, text)])
    person = telegram_link(actor=actor, code=code)
    if person is None:
        text = "This code is unknown, used or expired. Create a new one on the dashboard."
        return UpdateOutcome("command:link", outbound=[notice(place, message, text)])
    text = f"Linked: you are <b>{html.escape(person.get_username())}</b> on the dashboard now."
    return UpdateOutcome("command:link", outbound=[notice(place, message, text)])
