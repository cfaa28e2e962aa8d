"""The Telegram bridge as a delivery channel of `chats.deliveries`.

- A reply no Telegram update asked for (a scheduled run's turn) gets its outbox row when the
  turn is done: the Telegram chat and forum topic of its hub chat (`message_thread_id`), no
  reply-to (nothing in Telegram asked). The bridge sends it like any reply.
- A person is told something in their own private chat with the bot, when they linked a
  Telegram account (a user's private chat id is their user id).
- When a reply row is delivered (every part has its Telegram `message_id`) or given up on,
  `chats.signals.reply_delivered` / `reply_delivery_failed` say so, in the transaction that
  records it, so whoever waits for the receipt (schedules) records it with the row.
"""

import html
import logging

from django.conf import settings
from django.db import transaction

from bots.models import OutboundMessage
from bots.outbox import outbox_progress, outbox_send
from chats.deliveries import DeliveryChannel, DeliveryUnavailable
from chats.models import Actor, Channel, Chat, Turn
from chats.signals import reply_delivered, reply_delivery_failed

logger = logging.getLogger(__name__)


def _telegram_place(chat: Chat) -> tuple[int, int | None]:
    try:
        return int(chat.external_id), int(chat.thread_id) if chat.thread_id else None
    except ValueError:
        raise DeliveryUnavailable(f"chat {chat.chat_key} has no Telegram id") from None


def reply_queue(turn: Turn) -> dict:
    """Queue the reply of a finished turn in a Telegram chat (once: the row is the turn's);
    returns the receipt's "where"."""
    if not settings.TELEGRAM_BOT_TOKEN:
        raise DeliveryUnavailable("no Telegram bot is configured (TELEGRAM_BOT_TOKEN)")
    chat = turn.chat
    if chat.channel != Channel.TELEGRAM:
        raise DeliveryUnavailable(f"chat {chat.chat_key} is not a Telegram chat")
    telegram_chat_id, thread_id = _telegram_place(chat)
    row, _ = OutboundMessage.objects.get_or_create(
        turn=turn,
        defaults={
            "kind": OutboundMessage.Kind.REPLY,
            "chat": chat,
            "telegram_chat_id": telegram_chat_id,
            "thread_id": thread_id,
            "reply_to_message_id": None,
        },
    )
    return {
        "telegram_chat_id": row.telegram_chat_id,
        "message_thread_id": row.thread_id,
        "outbox": row.pk,
    }


def person_tell(*, person, text: str, kind: str, not_in: Chat | None = None) -> bool:
    """Queue `text` for `person`'s private chat with the bot (their first linked Telegram
    account); False when they linked none, or when that private chat is `not_in`."""
    if not settings.TELEGRAM_BOT_TOKEN or person is None:
        return False
    skip = None
    if not_in is not None and not_in.channel == Channel.TELEGRAM and not not_in.thread_id:
        skip = not_in.external_id
    actors = Actor.objects.filter(channel=Channel.TELEGRAM, namespace="", person=person)
    for external_id in actors.order_by("id").values_list("external_id", flat=True):
        if not external_id.isdigit() or external_id == skip:
            continue
        outbox_send(
            telegram_chat_id=int(external_id),
            text=f"ℹ️ {html.escape(text, quote=False)}",
            extra={"person_notice": kind},
        )
        return True
    return False


def delivery_channel() -> DeliveryChannel:
    return DeliveryChannel(
        channel=Channel.TELEGRAM, deliver_reply=reply_queue, tell_person=person_tell
    )


# --- the bridge reports back --------------------------------------------------------------


def _receipt(row: OutboundMessage, parts: int) -> dict:
    receipt = {
        "channel": Channel.TELEGRAM.value,
        "telegram_chat_id": row.telegram_chat_id,
        "message_thread_id": row.thread_id,
        "telegram_message_ids": list(row.message_ids or []),
        "parts": parts,
    }
    files = (row.payload or {}).get("files")
    if files:  # the reply's files, in order: name, size, state, message_id or error
        receipt["files"] = [{k: v for k, v in entry.items() if k != "key"} for entry in files]
    return receipt


def _announce(signal, row: OutboundMessage, **kwargs) -> None:
    for receiver, result in signal.send_robust(
        sender=OutboundMessage, turn_id=row.turn_id, chat_id=row.chat_id, **kwargs
    ):
        if isinstance(result, Exception):
            logger.error(
                "%r failed for outbox %s",
                receiver,
                row.pk,
                exc_info=(type(result), result, result.__traceback__),
            )


def reply_row_delivered(*, row: OutboundMessage, text: str, parts: int) -> None:
    """Record a reply row as delivered (every one of its `parts` sent, their ids on the row)
    and tell whoever waits for its receipt, in one transaction."""
    with transaction.atomic():
        outbox_progress(row=row, status=OutboundMessage.Status.DELIVERED, text=text)
        if row.kind == OutboundMessage.Kind.REPLY and row.turn_id is not None:
            _announce(reply_delivered, row, receipt=_receipt(row, parts))


def reply_row_failed(*, row: OutboundMessage, **fields) -> None:
    """Record that the bridge gave up on a row (`fields`: status, attempts, error) and, for
    a reply, tell whoever waits for its receipt, in one transaction."""
    with transaction.atomic():
        outbox_progress(row=row, **fields)
        if row.kind == OutboundMessage.Kind.REPLY and row.turn_id is not None:
            error = fields.get("error") or row.error or "the bridge gave up"
            receipt = _receipt(row, row.parts_sent)
            _announce(reply_delivery_failed, row, error=error, receipt=receipt)
