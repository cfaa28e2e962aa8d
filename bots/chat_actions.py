"""Chat actions ("typing…") the bridge shows while another app works for a chat, through a
registry: the bridge names no such app.

A source registers in its app's `AppConfig.ready()` (`register_chat_action_source(name,
source)`); `source()` answers, from the database and quickly, the Telegram chats (and forum
topics) where something is being worked on now for a person who waits for the bot (a voice
note being transcribed), each with the action to show. The bridge asks every
TELEGRAM_TYPING_INTERVAL_SECONDS and sends each action once per chat; Telegram shows one for
about 5 seconds, so the indicator lasts as long as the work, and a source bounds how long
it answers for a piece of work (a stuck job does not type forever). A streamed reply shows
its own "typing" (bots.delivery), so a chat with a reply in progress is skipped.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# The actions Telegram knows that a source may ask for (sendChatAction).
ACTIONS = ("typing", "record_voice", "upload_voice", "upload_document", "upload_photo")
# Chats answered per round at most: a burst of work never turns into a burst of calls.
MAX_PER_ROUND = 50


@dataclass(frozen=True)
class PendingAction:
    telegram_chat_id: int
    thread_id: int | None
    action: str = "typing"


_sources: dict[str, Callable[[], list[PendingAction]]] = {}


def register_chat_action_source(name: str, source: Callable[[], list[PendingAction]]) -> None:
    """Show `source()`'s chat actions while it answers them (the same name again replaces
    it: a second ready() is harmless)."""
    _sources[name] = source


def unregister_chat_action_source(name: str) -> None:
    _sources.pop(name, None)


def pending_chat_actions() -> list[PendingAction]:
    """Every source's pending actions, once per chat and topic, at most MAX_PER_ROUND; a
    failing source is logged and skipped."""
    seen: dict[tuple[int, int | None], PendingAction] = {}
    for name, source in list(_sources.items()):
        try:
            actions = source()
        except Exception:  # noqa: BLE001 - an indicator is never worth a stopped bridge
            logger.exception("chat action source %r failed", name)
            continue
        for action in actions:
            if action.action not in ACTIONS:
                logger.warning("chat action source %r asked for %r", name, action.action)
                continue
            seen.setdefault((action.telegram_chat_id, action.thread_id), action)
            if len(seen) >= MAX_PER_ROUND:
                return list(seen.values())
    return list(seen.values())
