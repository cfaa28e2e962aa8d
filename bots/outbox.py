"""The Telegram bridge's shared vocabulary: what applying an update produced
(`UpdateOutcome`) and the outbox every message to Telegram goes through (`outbox_send`,
`notice`; `outbox_open`, `outbox_progress` as the bot process works it). It imports no
handler, so every handler (commands, review buttons, approvals) may import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.utils import timezone

from bots.models import OutboundMessage
from bots.updates import Place
from chats.models import Chat, Message, Turn

if TYPE_CHECKING:  # python-telegram-bot loads only where Telegram is spoken
    from telegram import Message as TgMessage


@dataclass
class UpdateOutcome:
    """What one update did: `result` is recorded with the processed update id."""

    result: str
    message: Message | None = None
    turn: Turn | None = None
    outbound: list[OutboundMessage] = field(default_factory=list)

    @property
    def duplicate(self) -> bool:
        return self.result == "duplicate"


def outbox_send(
    *,
    telegram_chat_id: int,
    text: str,
    thread_id: int | None = None,
    reply_to_message_id: int | None = None,
    reply_markup: dict | None = None,
    parse_mode: str | None = "HTML",
    extra: dict | None = None,
    about: Chat | None = None,
) -> OutboundMessage:
    """Queue one sendMessage for the bot process (in the caller's transaction); `about`: the
    hub chat the message is about, so that its rows are found by an index later."""
    payload = {"text": text}
    if parse_mode:
        payload["parse_mode"] = parse_mode
    if reply_markup:
        payload["reply_markup"] = reply_markup
    payload.update(extra or {})
    return OutboundMessage.objects.create(
        kind=OutboundMessage.Kind.SEND,
        telegram_chat_id=telegram_chat_id,
        thread_id=thread_id,
        reply_to_message_id=reply_to_message_id,
        payload=payload,
        chat=about,
    )


def notice(place: Place, message: TgMessage, text: str) -> OutboundMessage:
    """Answer `message` where it was asked (a reply to it in a group), without the history."""
    return outbox_send(
        telegram_chat_id=place.telegram_chat_id,
        thread_id=place.thread_id,
        reply_to_message_id=None if place.is_private else message.message_id,
        text=text,
    )


def outbox_open(*, exclude: set[int] | None = None, limit: int = 50) -> list[OutboundMessage]:
    """Rows still to send (pending, or left sending by a process that stopped), oldest first."""
    rows = OutboundMessage.objects.filter(status__in=OutboundMessage.OPEN)
    if exclude:
        rows = rows.exclude(pk__in=exclude)
    return list(rows.order_by("id")[:limit])


def outbox_progress(*, row: OutboundMessage, **fields) -> None:
    """Record what was sent so far (status, Telegram message ids, parts), at once."""
    for name, value in fields.items():
        setattr(row, name, value)
    if fields.get("status") == OutboundMessage.Status.DELIVERED:
        row.delivered_at = timezone.now()
        fields["delivered_at"] = row.delivered_at
    OutboundMessage.objects.filter(pk=row.pk).update(**fields, updated_at=timezone.now())
