"""The Telegram dispatcher. `telegram_update_process` is the one path every update takes
(long polling, the webhook, the benchmark): dedupe, access, ingest, turn, outbox. It routes a
command to the built-ins (`bots.builtin_commands`) or the registered slash commands
(`bots.commands`), and a button press to the handler registered for its prefix
(`bots.callbacks.register_callback_handler`): it names no button handler. A photo or a
document goes to the app registered for media (`bots.media`), which names none either."""

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from telegram import Message as TgMessage
from telegram import Update

from bots.builtin_commands import builtin_command_apply, command_link
from bots.callbacks import callback_query_dispatch
from bots.commands import COMMANDS, registry_command_apply
from bots.media import MediaMessage, album_hold, media_take, media_taken
from bots.models import BotState, OutboundMessage, ProcessedUpdate
from bots.outbox import UpdateOutcome
from bots.pairing import chat_allowed, pairing_notice, user_allowed
from bots.signals import update_processed
from bots.updates import (
    BotIdentity,
    Place,
    addresses_bot,
    command_of,
    describe,
    display_name,
    parse_update,
    place_of,
    real_reply_to,
    update_kind,
)
from chats.agent.turns import message_received, turn_request
from chats.keys import make_chat_key
from chats.models import Actor, Channel, ChatKind, Message, Turn, TurnHold
from chats.rows import insert_row
from chats.services import actor_get_or_create, message_ingest, message_record_edit
from chats.slash_commands import slash_command

logger = logging.getLogger(__name__)

# --- identity ---------------------------------------------------------------------------


def bot_id_from_token(token: str) -> int:
    """The bot's numeric id, the part of the token before the colon."""
    head = token.split(":", 1)[0]
    if not head.isdigit():
        raise ValueError("TELEGRAM_BOT_TOKEN must look like 123456:ABC... (the bot id first)")
    return int(head)


_identity_cache: dict[int, tuple[float, BotIdentity]] = {}


def bot_identity() -> BotIdentity:
    """The configured bot's id and username (as the bot process last read it from getMe)."""
    bot_id = bot_id_from_token(settings.TELEGRAM_BOT_TOKEN)
    cached = _identity_cache.get(bot_id)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    username = BotState.objects.filter(bot_id=bot_id).values_list("username", flat=True).first()
    identity = BotIdentity(bot_id, username or "")
    _identity_cache[bot_id] = (time.monotonic() + 30, identity)
    return identity


def bot_state_save(*, identity: BotIdentity) -> BotState:
    """Remember the bot's username (from getMe), for mentions seen by the webhook process."""
    state, _ = BotState.objects.update_or_create(
        bot_id=identity.bot_id, defaults={"username": identity.username}
    )
    _identity_cache.pop(identity.bot_id, None)
    return state


def polling_offset(*, bot_id: int) -> int:
    """The getUpdates offset to continue from (0 on a first start)."""
    return BotState.objects.filter(bot_id=bot_id).values_list("offset", flat=True).first() or 0


def polling_offset_save(*, bot_id: int, offset: int) -> None:
    """Persist the offset; it only moves forward."""
    state, _ = BotState.objects.get_or_create(bot_id=bot_id)
    BotState.objects.filter(pk=state.pk, offset__lt=offset).update(
        offset=offset, updated_at=timezone.now()
    )


# --- processing updates -----------------------------------------------------------------


def telegram_update_process(
    update: Update | dict, *, identity: BotIdentity | None = None
) -> UpdateOutcome:
    """Apply one Telegram update exactly once: a redelivery, a concurrent delivery or a
    crash at any point never stores a message twice, answers twice or loses a reply.

    The message is stored first through the idempotent ingestion service (a retry finds
    it); the processed update id then commits in one transaction with everything that must
    happen once: the turn, the outbox rows to send, a command's effect. Raises BadUpdate for
    JSON that is not an update; content that cannot be stored is recorded and skipped."""
    if not isinstance(update, Update):
        update = parse_update(update)
    identity = identity or bot_identity()
    kind = update_kind(update)
    if _processed(identity.bot_id, update.update_id):
        outcome = UpdateOutcome("duplicate")
    else:
        claim = _Claim(identity.bot_id, update.update_id, kind)
        try:
            outcome = _apply(update, kind, identity, claim)
        except _AlreadyProcessed:
            outcome = UpdateOutcome("duplicate")
    update_processed.send_robust(sender=UpdateOutcome, kind=kind, duplicate=outcome.duplicate)
    return outcome


class _AlreadyProcessed(Exception):
    pass


def _processed(bot_id: int, update_id: int) -> bool:
    """Whether the update was applied already: one indexed lookup per update, written as SQL
    because the ORM's query building cost more than the lookup on this hot path."""
    table = connection.ops.quote_name(ProcessedUpdate._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {table} WHERE bot_id = %s AND update_id = %s LIMIT 1",
            [bot_id, update_id],
        )
        return cursor.fetchone() is not None


@dataclass(frozen=True)
class _Claim:
    bot_id: int
    update_id: int
    kind: str

    def commit(self, effects) -> UpdateOutcome:
        """Run `effects` and record the update as processed, in one transaction; a
        concurrent delivery that got there first rolls this one back entirely."""
        try:
            with transaction.atomic():
                outcome = effects()
                insert_row(
                    ProcessedUpdate(
                        bot_id=self.bot_id,
                        update_id=self.update_id,
                        kind=self.kind,
                        outcome=outcome.result[:32],
                    )
                )
        except IntegrityError:
            if _processed(self.bot_id, self.update_id):
                raise _AlreadyProcessed() from None
            raise
        return outcome


def _apply(update: Update, kind: str, identity: BotIdentity, claim: _Claim) -> UpdateOutcome:
    from chats.services import IngestError

    try:
        if kind == "message":
            return _apply_message(update.message, identity, claim)
        if kind == "edited_message":
            return claim.commit(lambda: _apply_edit(update.edited_message))
        if kind == "callback_query":
            query = update.callback_query
            return claim.commit(lambda: callback_query_dispatch(query, identity))
    except IngestError as exc:
        # Nothing of it can be stored (e.g. an id with control characters): skip it for good.
        logger.warning("telegram update %s refused: %s", update.update_id, exc)
        return claim.commit(lambda: UpdateOutcome("refused"))
    return claim.commit(lambda: UpdateOutcome("ignored:type"))


def _telegram_actor(message: TgMessage) -> Actor | None:
    user = message.from_user
    if user is None:
        return None
    return actor_get_or_create(
        channel=Channel.TELEGRAM, user_id=user.id, display_name=display_name(user)
    )


def _apply_message(message: TgMessage, identity: BotIdentity, claim: _Claim) -> UpdateOutcome:
    place = place_of(message)
    if place is None:
        return claim.commit(lambda: UpdateOutcome("ignored:channel"))
    user = message.from_user
    command = command_of(message, identity)
    if place.is_private:
        if user is None:
            return claim.commit(lambda: UpdateOutcome("ignored:no sender"))
        actor = _telegram_actor(message)
        if not user_allowed(user_id=user.id, actor=actor):
            if command is not None and command.name == "link":
                return claim.commit(lambda: command_link(place, message, actor, command.args))
            return claim.commit(lambda: pairing_notice(place, message))
    elif not chat_allowed(telegram_chat_id=place.telegram_chat_id):
        logger.info("ignored a message from unknown Telegram chat %s", place.telegram_chat_id)
        return claim.commit(lambda: UpdateOutcome("ignored:unknown chat"))

    if command is not None and command.name in COMMANDS:
        return claim.commit(
            lambda: builtin_command_apply(place, message, command, _telegram_actor(message))
        )
    if command is not None and slash_command(command.name, "telegram") is not None:
        note = ""
        if slash_command(command.name, "telegram").uses_roles and not place.is_private:
            from bots.group_admins import group_admins_refresh

            # Outside the claim (a network call), and idempotent: Telegram's answer is set.
            note = group_admins_refresh(place)
        return claim.commit(
            lambda: registry_command_apply(
                place, message, command, _telegram_actor(message), roles_note=note
            )
        )

    content = describe(message)
    if content is None:
        return claim.commit(lambda: UpdateOutcome("ignored:service"))
    respond = place.is_private or _group_wants_answer(message, identity, command)
    if user is not None and user.is_bot:
        respond = False
    telegram_meta = {
        "message_id": message.message_id,
        "chat_id": place.telegram_chat_id,
        "thread_id": place.thread_id,
        "user_id": user.id if user else None,
        "username": user.username if user else None,
        "addressed": respond,
    }
    if content.attachment:
        telegram_meta["attachment"] = content.attachment
    replied = real_reply_to(message)
    # Idempotent on its own (one row per chat and message id), so it runs outside the
    # claim's transaction, where the ingestion caches work.
    result = message_ingest(
        channel=Channel.TELEGRAM,
        chat_id=place.telegram_chat_id,
        thread_id=place.thread_id,
        chat_kind=place.kind,
        chat_title=place.title,
        user_id=user.id if user else (message.sender_chat.id if message.sender_chat else None),
        user_name=display_name(user),
        message_id=message.message_id,
        text=content.text_with_file() if media_taken(content.attachment) else content.text,
        source_ts=message.date,
        reply_to_message_id=replied.message_id if replied is not None else None,
        metadata={"telegram": telegram_meta},
    )
    return claim.commit(lambda: _answer(result, place, message, respond))


def _answer(result, place: Place, message: TgMessage, respond: bool) -> UpdateOutcome:
    """Request the turn (once per message) and queue its streamed reply; a message with
    media an app takes, or an album's item, has its turn held (`bots.media`) and answered
    when it is released (`reply_for_held_turn`)."""
    if result.duplicate and (
        Turn.objects.filter(trigger=result.message).exists()
        or TurnHold.objects.filter(message=result.message).exists()
    ):
        return UpdateOutcome("duplicate message", message=result.message)
    held = _media_hold(result.message, place, message, respond)
    if result.duplicate:
        # Stored by an earlier delivery that died before it could answer.
        if not respond or held:
            return UpdateOutcome("duplicate message", message=result.message)
        turn = turn_request(message=result.message)
    else:
        turn = message_received(result, respond=respond, held=held)
    outcome = UpdateOutcome("stored", message=result.message, turn=turn)
    if held:
        outcome.result = "held"
    if turn is not None:
        outcome.result = "answering"
        outcome.outbound.append(
            insert_row(
                OutboundMessage(
                    kind=OutboundMessage.Kind.REPLY,
                    turn=turn,
                    chat=result.chat,
                    telegram_chat_id=place.telegram_chat_id,
                    thread_id=place.thread_id,
                    reply_to_message_id=None if place.is_private else message.message_id,
                )
            )
        )
    return outcome


def _media_hold(stored: Message, place: Place, message: TgMessage, respond: bool) -> bool:
    """Hand the message's media to the app that takes it, and hold an album item for its
    quiet period; True when its turn is held."""
    if not (stored.metadata or {}).get("telegram", {}).get("attachment"):
        return False
    item = MediaMessage(telegram=message, message=stored, place=place, respond=respond)
    taken = media_take(item)
    grouped = album_hold(item)
    return taken or grouped


def reply_for_held_turn(sender=None, turn: Turn | None = None, **kwargs) -> None:
    """Receiver of `chats.signals.held_turn_requested`: a held Telegram message's turn (its
    files read, its album complete) gets its streamed reply as if requested on arrival
    (in the releasing transaction, once per turn)."""
    if turn is None:
        return
    chat = turn.chat
    if chat.channel != Channel.TELEGRAM:
        return
    meta = (turn.trigger.metadata or {}).get("telegram") or {}
    telegram_chat_id = meta.get("chat_id")
    if not isinstance(telegram_chat_id, int):
        return
    private = chat.kind == ChatKind.DM
    OutboundMessage.objects.get_or_create(
        turn=turn,
        defaults={
            "kind": OutboundMessage.Kind.REPLY,
            "chat": chat,
            "telegram_chat_id": telegram_chat_id,
            "thread_id": meta.get("thread_id"),
            "reply_to_message_id": None if private else meta.get("message_id"),
        },
    )


def _group_wants_answer(message: TgMessage, identity: BotIdentity, command) -> bool:
    if settings.TELEGRAM_GROUP_TRIGGER == "all":
        return True
    return command is not None or addresses_bot(message, identity)


def _apply_edit(message: TgMessage) -> UpdateOutcome:
    """An edit passes the same gates as a new message (the allow-lists and pairing as they
    are now, not when the original arrived) and must come from the original's author."""
    place = place_of(message)
    if place is None:
        return UpdateOutcome("ignored:channel")
    user = message.from_user
    if place.is_private:
        if user is None or not user_allowed(user_id=user.id, actor=_telegram_actor(message)):
            return UpdateOutcome("ignored:not allowed")
    elif not chat_allowed(telegram_chat_id=place.telegram_chat_id):
        return UpdateOutcome("ignored:unknown chat")
    key = make_chat_key(Channel.TELEGRAM, place.telegram_chat_id, place.thread_id)
    stored = (
        Message.objects.select_related("actor")
        .filter(chat__chat_key=key, external_id=str(message.message_id))
        .first()
    )
    content = describe(message)
    if stored is None or content is None:
        return UpdateOutcome("ignored:edit")
    author = user.id if user else (message.sender_chat.id if message.sender_chat else None)
    if stored.actor is None or stored.actor.external_id != str(author):
        return UpdateOutcome("ignored:not the author")
    text = content.text_with_file() if media_taken(content.attachment) else content.text
    message_record_edit(message=stored, text=text, source_ts=message.edit_date)
    return UpdateOutcome("edited", message=stored)


def processed_updates_prune(*, older_than: timedelta = timedelta(days=3)) -> int:
    """Forget processed update ids older than Telegram ever redelivers (24 hours)."""
    deleted, _ = ProcessedUpdate.objects.filter(
        processed_at__lt=timezone.now() - older_than
    ).delete()
    return deleted
