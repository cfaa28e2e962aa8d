"""Delivery channels: how a reply the hub stored reaches a chat that lives elsewhere (a
Telegram group) when no message of that channel asked for it (a scheduled run), and how a
person is told something in their own private chat on that channel.

A channel adapter (the Telegram bridge) registers a `DeliveryChannel` in
`AppConfig.ready()`; `chats` never imports it, and the apps that need a delivery (schedules)
never import the adapter. The adapter reports how each reply's delivery ended with
`chats.signals.reply_delivered` (every part sent, with the channel's message ids) or
`chats.signals.reply_delivery_failed` (refused for good: the bot blocked or removed, the
topic or chat gone, or retries exhausted).

A person with no private chat on any registered channel is told on their dashboard
(`PersonNotice`, shown on the chat list until they dismiss it).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from chats.models import Chat, Turn
from chats.person_notices import person_notice_post

logger = logging.getLogger(__name__)

DASHBOARD = "dashboard"
NOTICE_CHARS = 1000


class DeliveryUnavailable(Exception):
    """The reply cannot be handed to its channel at all (no adapter, none configured)."""


@dataclass(frozen=True)
class DeliveryChannel:
    channel: str  # a chats.models.Channel value
    # Queue the stored reply of the finished `turn` for its chat, in the caller's transaction
    # (once per turn: a second call returns the same). Returns where it goes, for a receipt
    # (e.g. {"telegram_chat_id": ..., "message_thread_id": ...}); raises
    # DeliveryUnavailable when it cannot be sent at all.
    deliver_reply: Callable[[Turn], dict]
    # Queue `text` (plain) for `person` in their own private chat on this channel, in the
    # caller's transaction; False when they have none there (or only `not_in`).
    tell_person: Callable[..., bool] | None = None


_channels: dict[str, DeliveryChannel] = {}


def register_delivery_channel(channel: DeliveryChannel) -> None:
    """Add (or replace, by channel) the adapter that delivers replies of that channel."""
    _channels[channel.channel] = channel


def delivery_channel(channel: str) -> DeliveryChannel | None:
    return _channels.get(channel)


def reply_deliver(*, turn: Turn) -> dict:
    """Hand the stored reply of a finished `turn` to its chat's channel (in the caller's
    transaction); the receipt fields it returns say where. DeliveryUnavailable when no
    adapter of that channel is registered or it cannot send."""
    chat = turn.chat
    adapter = _channels.get(chat.channel)
    if adapter is None:
        raise DeliveryUnavailable(f"no delivery channel for {chat.channel} is installed")
    return adapter.deliver_reply(turn)


def person_tell(*, person: Any, text: str, kind: str, not_in: Chat | None = None) -> str:
    """Tell `person` `text`: in their own private chat on the first channel that has one
    (other than `not_in`, the chat that just failed), else on their dashboard. Returns where
    ("telegram", ..., or "dashboard"). Runs in the caller's transaction; a channel that
    fails is logged and the dashboard used instead."""
    text = text[:NOTICE_CHARS]
    for name in sorted(_channels):
        adapter = _channels[name]
        if adapter.tell_person is None:
            continue
        try:
            with transaction.atomic():  # a savepoint: its failure leaves the caller's work
                if adapter.tell_person(person=person, text=text, kind=kind, not_in=not_in):
                    return name
        except Exception:  # noqa: BLE001 - the dashboard still tells them
            logger.exception("could not tell person %s through %s", person.pk, name)
    person_notice_post(person=person, text=text, kind=kind)
    return DASHBOARD
