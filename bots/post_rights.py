"""Whether a hub member may still speak in a Telegram chat: the Telegram part of
`chats.selectors.chat_may_post`, registered for the `telegram` channel by `BotsConfig`.

The hub's membership of a group's chat outlives leaving the group or a ban (Telegram tells
a bot about neither unless it is an administrator), so only the Bot API's answer counts:
the person's linked Telegram account must be in the group now (getChatMember). A private
chat is its one Telegram user's: only the person linked to that account speaks there. With
no bot configured there is no Telegram to ask and nothing reaches it either: the hub's
membership stands.
"""

import logging

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from bots.bot_api import BotApiError, chat_member_status
from chats.models import Actor, Channel, Chat, ChatKind
from chats.posting import ALLOWED, PostVerdict

logger = logging.getLogger(__name__)


def _linked_telegram_ids(person) -> list[str]:
    return list(
        Actor.objects.filter(channel=Channel.TELEGRAM, namespace="", person=person)
        .order_by("id")
        .values_list("external_id", flat=True)
    )


# Telegram's answer about one account in one group is kept this long, so a person posting
# from the dashboard waits on the Bot API once per minute at most, not on every message;
# a ban reaches the hub within this time. Only definite answers are kept, never "unsure".
MEMBER_STATUS_SECONDS = 60


def _member_status(telegram_chat_id: int, user_id: int) -> tuple[str, bool]:
    """chat_member_status, cached MEMBER_STATUS_SECONDS; a dead cache only costs the call."""
    key = f"bots:member-status:{telegram_chat_id}:{user_id}"
    now = timezone.now().timestamp()
    try:
        known = cache.get(key)
    except Exception:  # noqa: BLE001 - Redis down: ask Telegram, as without a cache
        known = None
    if known is not None and 0 <= now - known[2] < MEMBER_STATUS_SECONDS:
        return known[0], bool(known[1])
    status, inside = chat_member_status(telegram_chat_id, user_id)
    try:
        cache.set(key, (status, inside, now), MEMBER_STATUS_SECONDS)
    except Exception:  # noqa: BLE001
        logger.warning("could not keep Telegram's member status of %s in %s", user_id, key)
    return status, inside


def telegram_may_post(person, chat: Chat) -> PostVerdict:
    """May this hub member speak in the Telegram `chat` now (see the module's docstring)?"""
    user_ids = _linked_telegram_ids(person)
    name = person.get_username()
    if chat.kind == ChatKind.DM:
        if chat.external_id in user_ids:
            return ALLOWED
        return PostVerdict(False, "this is another person's private chat with the bot")
    if not settings.TELEGRAM_BOT_TOKEN:
        return ALLOWED
    if not user_ids:
        return PostVerdict(False, f"{name} has no Telegram account linked to speak in this group")
    unsure = ""
    for user_id in user_ids:
        try:
            status, inside = _member_status(int(chat.external_id), int(user_id))
        except (BotApiError, ValueError) as exc:
            logger.warning("could not ask Telegram about %s in %s: %s", name, chat.chat_key, exc)
            unsure = str(exc)
            continue
        if inside:
            return ALLOWED
    if unsure:
        return PostVerdict(
            False, f"Telegram could not say whether {name} is still in this group", unsure=True
        )
    gone = "was banned from" if status == "kicked" else "is no longer in"
    return PostVerdict(False, f"{name} {gone} this Telegram group")
