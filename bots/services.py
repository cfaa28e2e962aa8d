"""Writes of the Telegram bridge. `telegram_update_process` is the one path every update
takes (long polling, the webhook, the benchmark): dedupe, access, ingest, turn, outbox."""

import html
import logging
import secrets
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from telegram import Message as TgMessage
from telegram import Update

from bots.models import (
    BotState,
    LinkCode,
    OutboundMessage,
    PairingRequest,
    ProcessedUpdate,
    hash_link_code,
)
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
from chats.agent.turns import message_received, turn_request, turn_stop
from chats.keys import make_chat_key
from chats.models import Actor, Channel, Chat, Message, Turn
from chats.rows import insert_row
from chats.services import (
    actor_get_or_create,
    actor_link,
    chat_get_or_create,
    chat_reset,
    message_ingest,
    message_record_edit,
)
from chats.slash_commands import slash_command

logger = logging.getLogger(__name__)

COMMANDS = {
    "start": "Say hello and see what I can do",
    "new": "Start a fresh context (the history is kept)",
    "stop": "Stop the reply I am writing",
    "memory": "What I remember about you",
    "link": "Link this Telegram account to your dashboard login: /link CODE",
    "help": "List the commands",
}
PAIRING_NOTICE_EVERY = timedelta(minutes=10)
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud safely
STOP_REASON = "stopped from Telegram"


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


# --- access -----------------------------------------------------------------------------


def user_allowed(*, user_id: int, actor: Actor | None = None) -> bool:
    """Allow-listed, approved by pairing, or linked to an active dashboard Person."""
    if str(user_id) in settings.TELEGRAM_ALLOWED_USERS:
        return True
    if actor is not None and actor.person_id is not None:
        person = actor.person
        if person is not None and person.is_active:
            return True
    return PairingRequest.objects.filter(
        user_id=user_id, status=PairingRequest.Status.APPROVED
    ).exists()


def chat_allowed(*, telegram_chat_id: int) -> bool:
    """Groups work only when listed in TELEGRAM_ALLOWED_CHATS."""
    return str(telegram_chat_id) in settings.TELEGRAM_ALLOWED_CHATS


# --- the outbox -------------------------------------------------------------------------


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


def _notice(place: Place, message: TgMessage, text: str) -> OutboundMessage:
    return outbox_send(
        telegram_chat_id=place.telegram_chat_id,
        thread_id=place.thread_id,
        reply_to_message_id=None if place.is_private else message.message_id,
        text=text,
    )


# --- processing updates -----------------------------------------------------------------


@dataclass
class UpdateOutcome:
    result: str
    message: Message | None = None
    turn: Turn | None = None
    outbound: list[OutboundMessage] = field(default_factory=list)

    @property
    def duplicate(self) -> bool:
        return self.result == "duplicate"


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
            if (query.data or "").startswith("skl:"):
                from bots.skill_reviews import callback_query_apply
            elif (query.data or "").startswith("tool:"):
                from bots.tool_approvals import callback_query_apply
            elif (query.data or "").startswith("sch:"):
                from bots.schedule_reviews import callback_query_apply
            else:
                from bots.memory_reviews import callback_query_apply

            return claim.commit(lambda: callback_query_apply(query, identity))
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
                return claim.commit(lambda: _command_link(place, message, actor, command.args))
            return claim.commit(lambda: _pairing_notice(place, message))
    elif not chat_allowed(telegram_chat_id=place.telegram_chat_id):
        logger.info("ignored a message from unknown Telegram chat %s", place.telegram_chat_id)
        return claim.commit(lambda: UpdateOutcome("ignored:unknown chat"))

    if command is not None and command.name in COMMANDS:
        return claim.commit(lambda: _apply_command(place, message, command))
    if command is not None and slash_command(command.name) is not None:
        from bots.commands import registry_command_apply

        note = ""
        if slash_command(command.name).uses_roles and not place.is_private:
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
        text=content.text,
        source_ts=message.date,
        reply_to_message_id=replied.message_id if replied is not None else None,
        metadata={"telegram": telegram_meta},
    )
    return claim.commit(lambda: _answer(result, place, message, respond))


def _answer(result, place: Place, message: TgMessage, respond: bool) -> UpdateOutcome:
    """Request the turn (once per message) and queue its streamed reply."""
    if result.duplicate:
        # Stored by an earlier delivery: answer only if that delivery died before it could.
        if not respond or Turn.objects.filter(trigger=result.message).exists():
            return UpdateOutcome("duplicate message", message=result.message)
        turn = turn_request(message=result.message)
    else:
        turn = message_received(result, respond=respond)
    outcome = UpdateOutcome("stored", message=result.message, turn=turn)
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
    message_record_edit(message=stored, text=content.text, source_ts=message.edit_date)
    return UpdateOutcome("edited", message=stored)


# --- commands ---------------------------------------------------------------------------


def _chat_of(place: Place) -> Chat:
    chat, _ = chat_get_or_create(
        channel=Channel.TELEGRAM,
        chat_id=place.telegram_chat_id,
        thread_id=place.thread_id,
        kind=place.kind,
        title=place.title,
    )
    return chat


def _apply_command(place: Place, message: TgMessage, command) -> UpdateOutcome:
    actor = _telegram_actor(message)
    name = command.name
    if name in ("start", "help"):
        from bots.commands import command_list

        lines = [f"/{cmd} – {html.escape(text)}" for cmd, text in command_list()]
        intro = (
            f"Hi {html.escape(display_name(message.from_user))}! I'm {settings.AGENT_NAME}."
            if name == "start"
            else "Commands:"
        )
        if not place.is_private and name == "start":
            intro += " In this group I answer when you mention me or reply to me."
        return UpdateOutcome(
            "command:" + name, outbound=[_notice(place, message, intro + "\n\n" + "\n".join(lines))]
        )
    if name == "new":
        chat = _chat_of(place)
        chat_reset(chat=chat, actor=actor)
        text = (
            "Fresh start: I will not use the earlier messages as context "
            "(they stay in the history)."
        )
        return UpdateOutcome("command:new", outbound=[_notice(place, message, text)])
    if name == "stop":
        chat = _chat_of(place)
        stopped = 0
        open_turns = Turn.objects.filter(
            chat=chat, status__in=[Turn.Status.QUEUED, Turn.Status.RUNNING, Turn.Status.WAITING]
        ).values_list("pk", flat=True)
        for turn_id in list(open_turns):
            reason = f"{STOP_REASON} by {display_name(message.from_user)}"
            stopped += turn_stop(turn_id=turn_id, chat=chat, reason=reason)
        text = "Stopped." if stopped else "Nothing to stop: I am not writing anything."
        return UpdateOutcome("command:stop", outbound=[_notice(place, message, text)])
    if name == "memory":
        return _command_memory(place, message, actor)
    if name == "link":
        return _command_link(place, message, actor, command.args)
    return UpdateOutcome("ignored:command")


def _command_memory(place: Place, message: TgMessage, actor: Actor | None) -> UpdateOutcome:
    if not place.is_private:
        text = "Ask me /memory in a private chat: what I remember about you is yours."
        return UpdateOutcome("command:memory", outbound=[_notice(place, message, text)])
    from memory.selectors import memory_entries_about

    entries = memory_entries_about(person=actor.person if actor else None, actor=actor)
    if not entries:
        text = "I do not remember anything about you yet."
    else:
        lines = []
        for entry in entries:
            mark = " <i>(waiting for your approval)</i>" if entry.status == "pending" else ""
            lines.append(f"• {html.escape(entry.summary_line())}{mark}")
        text = "What I remember about you:\n\n" + "\n".join(lines)
    return UpdateOutcome("command:memory", outbound=[_notice(place, message, text)])


def _command_link(place: Place, message: TgMessage, actor: Actor | None, code: str):
    if not place.is_private:
        text = "Send /link CODE in a private chat with me, never in a group."
        return UpdateOutcome("command:link", outbound=[_notice(place, message, text)])
    if actor is None or not code:
        text = "Create a code on the dashboard (Telegram page), then send /link CODE here."
        return UpdateOutcome("command:link", outbound=[_notice(place, message, text)])
    person = telegram_link(actor=actor, code=code)
    if person is None:
        text = "This code is unknown, used or expired. Create a new one on the dashboard."
        return UpdateOutcome("command:link", outbound=[_notice(place, message, text)])
    text = f"Linked: you are <b>{html.escape(person.get_username())}</b> on the dashboard now."
    return UpdateOutcome("command:link", outbound=[_notice(place, message, text)])


# --- pairing ----------------------------------------------------------------------------


def _new_code(length: int = 8) -> str:
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(length))
    return f"{raw[:4]}-{raw[4:]}"


def _pairing_notice(place: Place, message: TgMessage) -> UpdateOutcome:
    user = message.from_user
    request, created = PairingRequest.objects.get_or_create(
        user_id=user.id,
        defaults={
            "display_name": display_name(user)[:255],
            "username": (user.username or "")[:64],
            "code": _new_code(),
        },
    )
    if request.status == PairingRequest.Status.REJECTED:
        return UpdateOutcome("ignored:rejected user")
    now = timezone.now()
    if not created and request.created_at > now - PAIRING_NOTICE_EVERY:
        return UpdateOutcome("pairing:waiting")
    if not created:
        PairingRequest.objects.filter(pk=request.pk).update(created_at=now)
    text = (
        "Hi! I don't know you yet. Your pairing code is "
        f"<code>{request.code}</code>. Ask someone on the team to approve it on the hub's "
        "dashboard (Telegram page); I will tell you when you're in.\n\n"
        "Already have a dashboard login? Create a link code there and send /link CODE."
    )
    return UpdateOutcome("pairing:code", outbound=[_notice(place, message, text)])


def pairing_decide(
    *, request_id: int, approve: bool, staff: AbstractBaseUser
) -> PairingRequest | None:
    """Approve (the user may talk to the bot from now on, and is told so) or reject a
    pending pairing request; None when it is gone or already decided."""
    with transaction.atomic():
        request = (
            PairingRequest.objects.select_for_update()
            .filter(pk=request_id, status=PairingRequest.Status.PENDING)
            .first()
        )
        if request is None:
            return None
        request.status = (
            PairingRequest.Status.APPROVED if approve else PairingRequest.Status.REJECTED
        )
        request.decided_at = timezone.now()
        request.decided_by = staff
        request.save(update_fields=["status", "decided_at", "decided_by"])
        if approve:
            outbox_send(
                telegram_chat_id=request.user_id,
                text="You're in: your pairing request was approved. Say hello!",
            )
    logger.info("pairing of Telegram user %s %s by %s", request.user_id, request.status, staff)
    return request


def pairing_revoke(*, request_id: int, staff: AbstractBaseUser) -> bool:
    """Withdraw an approval: the user gets a pairing code again on their next message."""
    with transaction.atomic():
        deleted, _ = PairingRequest.objects.filter(
            pk=request_id, status=PairingRequest.Status.APPROVED
        ).delete()
    if deleted:
        logger.info("pairing %s revoked by %s", request_id, staff)
    return bool(deleted)


# --- linking ----------------------------------------------------------------------------


def link_code_create(*, person: AbstractBaseUser) -> tuple[LinkCode, str]:
    """A fresh one-time /link code for `person` (earlier open codes stop working); the raw
    code is returned once, only its hash is stored."""
    with transaction.atomic():
        LinkCode.objects.filter(person=person, used_at__isnull=True).delete()
        raw = _new_code()
        code = LinkCode.objects.create(
            person=person,
            code_hash=hash_link_code(raw),
            expires_at=timezone.now() + timedelta(minutes=settings.TELEGRAM_LINK_CODE_TTL_MINUTES),
        )
    return code, raw


def telegram_link(*, actor: Actor, code: str) -> AbstractBaseUser | None:
    """Link `actor` to the Person who created `code`, once; None for an unknown, used or
    expired code (or an inactive person)."""
    with transaction.atomic():
        link = (
            LinkCode.objects.select_for_update()
            .select_related("person")
            .filter(code_hash=hash_link_code(code))
            .first()
        )
        if link is None or not link.is_usable or not link.person.is_active:
            return None
        link.used_at = timezone.now()
        link.used_by = actor
        link.save(update_fields=["used_at", "used_by"])
        actor_link(actor=actor, person=link.person)
    return link.person


# --- the outbox, as the bot process works it ---------------------------------------------


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


def processed_updates_prune(*, older_than: timedelta = timedelta(days=3)) -> int:
    """Forget processed update ids older than Telegram ever redelivers (24 hours)."""
    deleted, _ = ProcessedUpdate.objects.filter(
        processed_at__lt=timezone.now() - older_than
    ).delete()
    return deleted
