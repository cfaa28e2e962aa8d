"""A Telegram group's administrators as the deciders of its chat (and of its forum topics).

When a command that depends on who decides (`SlashCommand.uses_roles`, e.g. `/tools`) is
used in a group, the bridge reads the group's administrators from the Bot API, at most once
per `REFRESH_SECONDS` per group, and hands them to `toolservers.roles.telegram_admins_apply`.
If Telegram cannot answer, the roles known from the last reading stay and the answer says so.
"""

import logging
from datetime import timedelta

from django.utils import timezone

from bots.bot_api import BotApiError, chat_administrators
from bots.updates import Place
from chats.models import Channel, ChatKind
from chats.services import chat_get_or_create
from toolservers.models import GroupRolesRefresh
from toolservers.roles import group_roles_failure, telegram_admins_apply

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 60


def _note(state: GroupRolesRefresh) -> str:
    if not state.error:
        return ""
    if state.refreshed_at is None:
        known = "no administrator of this group is known yet, so only staff decide here"
    else:
        when = timezone.localtime(state.refreshed_at).strftime("%Y-%m-%d %H:%M %Z")
        known = f"the roles read on {when} still apply"
    return f"(I could not read this group's administrators from Telegram just now; {known}.)"


def group_admins_refresh(place: Place) -> str:
    """Bring the group's admin roles up to date with Telegram (cached briefly); returns a note
    for the answer when Telegram could not be read ("" when the roles are current)."""
    if place.is_private:
        return ""
    chat, _ = chat_get_or_create(
        channel=Channel.TELEGRAM,
        chat_id=place.telegram_chat_id,
        kind=ChatKind.GROUP,
        title=place.title if place.kind == ChatKind.GROUP else "",
    )
    state = GroupRolesRefresh.objects.filter(chat=chat).first()
    if state is not None and state.tried_at > timezone.now() - timedelta(seconds=REFRESH_SECONDS):
        return _note(state)
    try:
        admin_ids = chat_administrators(place.telegram_chat_id)
    except BotApiError as exc:
        logger.warning("could not read the administrators of %s: %s", place.telegram_chat_id, exc)
        return _note(group_roles_failure(chat=chat, error=str(exc)))
    telegram_admins_apply(chat=chat, admin_user_ids=admin_ids)
    return ""
