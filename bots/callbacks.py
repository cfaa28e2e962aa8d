"""What a press of an inline button gets back: the answer to the callback (the small notice
Telegram shows the presser) and an edit of the message the button was on. Both are outbox
rows, sent by the bridge like every other message. And the one rule of every decision button
(memory and skills alike): a press counts only in the presser's own private chat.

Button handlers register here for the prefix of their callback data (`mem:…`, `skl:…`), in
`bots.apps.BotsConfig.ready()`, the way slash commands register with `chats.slash_commands`:
the dispatcher asks `callback_query_dispatch` and knows no handler by name, so a new kind of
button adds a handler module and a registration, and touches no other handler."""

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from bots.models import OutboundMessage
from bots.outbox import UpdateOutcome
from bots.updates import BotIdentity

if TYPE_CHECKING:  # python-telegram-bot loads only in the processes that talk to Telegram
    from telegram import CallbackQuery

CallbackHandler = Callable[["CallbackQuery", BotIdentity], UpdateOutcome]
PREFIX_RE = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
_handlers: dict[str, CallbackHandler] = {}


def register_callback_handler(prefix: str, handler: CallbackHandler) -> None:
    """Route presses whose callback data is `<prefix>:…` to `handler`, which applies the press
    in the update's transaction and returns its outcome. One handler per prefix; registering
    the same handler again (a second ready()) is harmless."""
    if not PREFIX_RE.match(prefix):
        raise ValueError(f"callback prefix {prefix!r} must match {PREFIX_RE.pattern}")
    known = _handlers.get(prefix)
    if known is not None and known is not handler:
        raise ValueError(f"callback prefix {prefix!r} is taken by {known!r}")
    _handlers[prefix] = handler


def callback_handlers() -> dict[str, CallbackHandler]:
    """The registered handlers by prefix (a copy)."""
    return dict(_handlers)


def callback_query_dispatch(query: "CallbackQuery", identity: BotIdentity) -> UpdateOutcome:
    """Apply a button press through the handler of its prefix; a press nobody handles (an old
    button, a removed app, forged data) gets a polite answer and decides nothing."""
    prefix, separator, _ = (query.data or "").partition(":")
    handler = _handlers.get(prefix) if separator else None
    if handler is None:
        return UpdateOutcome(
            "callback:unknown", outbound=[callback_answer(query, "This button is old.")]
        )
    return handler(query, identity)


def in_own_private_chat(query: "CallbackQuery") -> bool:
    """Was the button pressed in the presser's own private chat with the bot? Anywhere else (a
    group the message was forwarded to, say) a press must decide nothing: a decision is one
    person's, made where nobody else can press for them or watch the text it shows."""
    message = query.message
    return (
        message is not None
        and message.chat.type == "private"  # telegram.constants.ChatType.PRIVATE
        and message.chat.id == query.from_user.id
    )


def callback_answer(query: "CallbackQuery", text: str) -> OutboundMessage:
    """Answer the press with a short notice to the presser."""
    chat_id = query.message.chat.id if query.message is not None else query.from_user.id
    return OutboundMessage.objects.create(
        kind=OutboundMessage.Kind.ANSWER,
        telegram_chat_id=chat_id,
        payload={"callback_query_id": query.id, "text": text},
    )


def callback_edit(query: "CallbackQuery", text: str) -> list[OutboundMessage]:
    """Replace the pressed message's text (HTML) and so its buttons; nothing when Telegram
    no longer says which message it was."""
    if query.message is None:
        return []
    row = OutboundMessage.objects.create(
        kind=OutboundMessage.Kind.EDIT,
        telegram_chat_id=query.message.chat.id,
        payload={"message_id": query.message.message_id, "text": text, "parse_mode": "HTML"},
    )
    return [row]
