"""Notices the hub posts into a Telegram chat's history (`chats.notices`) are sent to that
Telegram chat (and forum topic) too, as plain escaped text, through the outbox like every
other message. The notice's text already follows the audience rule of the chat."""

import html
import logging

from django.conf import settings
from django.db import transaction

from bots.outbox import outbox_send
from chats.models import Channel

logger = logging.getLogger(__name__)


def on_notice_posted(sender=None, chat=None, message=None, **kwargs) -> None:
    """Receiver of `chats.signals.notice_posted`: queue the notice for a Telegram chat (in the
    notice's transaction, so both are stored or neither); other channels are not ours."""
    if chat is None or message is None or chat.channel != Channel.TELEGRAM:
        return
    if not settings.TELEGRAM_BOT_TOKEN:
        return
    try:
        telegram_chat_id = int(chat.external_id)
        thread_id = int(chat.thread_id) if chat.thread_id else None
    except ValueError:
        logger.warning("chat %s has no Telegram id: its notice stays in the history", chat.pk)
        return
    with transaction.atomic():  # a savepoint: a failure here never undoes the notice
        outbox_send(
            telegram_chat_id=telegram_chat_id,
            thread_id=thread_id,
            text=f"ℹ️ {html.escape(message.text, quote=False)}",
            extra={"notice": message.metadata.get("notice", ""), "notice_message": message.pk},
        )
