"""What a press of an inline button gets back: the answer to the callback (the small notice
Telegram shows the presser) and an edit of the message the button was on. Both are outbox
rows, sent by the bridge like every other message. And the one rule of every decision button
(memory and skills alike): a press counts only in the presser's own private chat."""

from telegram import CallbackQuery
from telegram.constants import ChatType

from bots.models import OutboundMessage


def in_own_private_chat(query: CallbackQuery) -> bool:
    """Was the button pressed in the presser's own private chat with the bot? Anywhere else (a
    group the message was forwarded to, say) a press must decide nothing: a decision is one
    person's, made where nobody else can press for them or watch the text it shows."""
    message = query.message
    return (
        message is not None
        and message.chat.type == ChatType.PRIVATE
        and message.chat.id == query.from_user.id
    )


def callback_answer(query: CallbackQuery, text: str) -> OutboundMessage:
    """Answer the press with a short notice to the presser."""
    chat_id = query.message.chat.id if query.message is not None else query.from_user.id
    return OutboundMessage.objects.create(
        kind=OutboundMessage.Kind.ANSWER,
        telegram_chat_id=chat_id,
        payload={"callback_query_id": query.id, "text": text},
    )


def callback_edit(query: CallbackQuery, text: str) -> list[OutboundMessage]:
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
