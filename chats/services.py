"""Writes to chats and history. Every adapter (web, Telegram, API, CLI, import) stores
messages through `message_ingest`, so idempotency and token counting live in one place."""

import json
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models.base import ModelState
from django.db.models.signals import post_delete
from django.utils import timezone

from chats.agent.tokens import count_tokens
from chats.keys import InvalidKey, make_chat_key, validate_channel, validate_id
from chats.models import (
    Actor,
    ApiToken,
    Chat,
    ChatKind,
    ChatMember,
    Message,
    MessageEdit,
    hash_api_token,
)
from chats.rows import insert_row
from chats.signals import actor_linked

MAX_DISPLAY_NAME = 255
MAX_TITLE = 255

DEFAULT_KIND_BY_CHANNEL = {
    "web": ChatKind.ROOM,
    "cli": ChatKind.CLI,
    "api": ChatKind.API,
}


class IngestError(ValueError):
    """Input that cannot be stored; the message says which field and why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class IngestResult:
    message: Message
    created: bool

    @property
    def duplicate(self) -> bool:
        return not self.created

    @property
    def chat(self) -> Chat:
        return self.message.chat


def validate_text(text: object, field: str = "text") -> str:
    """Text must be a str that PostgreSQL and SQLite can both store (no NUL, no lone surrogates)."""
    if not isinstance(text, str):
        raise IngestError(field, f"{field} must be a string")
    if "\x00" in text:
        raise IngestError(field, f"{field} must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise IngestError(field, f"{field} is not valid Unicode (lone surrogate)") from exc
    return text


def message_token_count(text: str, parts: list | None) -> int:
    """Tokens a stored message costs in a prompt: its text, plus its structured parts (tool
    calls and their arguments are sent to the model too). Computed once, at write time."""
    return count_tokens(text) + (
        count_tokens(json.dumps(parts, ensure_ascii=False)) if parts else 0
    )


def _clean_name(value: object, field: str, limit: int) -> str:
    if value is None:
        return ""
    value = validate_text(value, field).strip()
    return "".join(ch for ch in value if ch.isprintable())[:limit]


def _infer_kind(channel: str, thread_id: str | None) -> str:
    if thread_id:
        return ChatKind.TOPIC
    return DEFAULT_KIND_BY_CHANNEL.get(channel, ChatKind.DM)


def _clone(instance):
    """A shallow copy of a saved model instance (copy.copy is ten times slower)."""
    clone = instance.__class__.__new__(instance.__class__)
    clone.__dict__.update(instance.__dict__)
    clone._state = ModelState()
    clone._state.adding = False
    clone._state.db = instance._state.db
    return clone


class _RowCache:
    """A small per-process cache of Chat and Actor rows for the ingestion hot path.

    Entries live `ttl` seconds; callers get copies. A stale entry (a chat deleted in the
    admin) shows up as an integrity error on insert, which clears the cache and retries."""

    def __init__(self, size: int = 2048, ttl: float = 30.0):
        self.size, self.ttl = size, ttl
        self.rows: dict = {}

    def get(self, key):
        if transaction.get_connection().in_atomic_block:
            # Inside a caller's transaction a stale row would only fail at the caller's
            # commit, past our retry: read the database instead.
            return None
        entry = self.rows.get(key)
        if entry is None or entry[0] < time.monotonic():
            return None
        return _clone(entry[1])

    def put(self, key, row) -> None:
        if len(self.rows) >= self.size:
            self.rows.clear()
        self.rows[key] = (time.monotonic() + self.ttl, _clone(row))

    def clear(self) -> None:
        self.rows.clear()


_chats = _RowCache()
_actors = _RowCache()


def clear_ingest_caches(**_signal_kwargs) -> None:
    """Forget cached Chat and Actor rows (after a delete, an integrity error, in tests)."""
    _chats.clear()
    _actors.clear()


post_delete.connect(clear_ingest_caches, sender=Chat, dispatch_uid="ingest-cache-chat")
post_delete.connect(clear_ingest_caches, sender=Actor, dispatch_uid="ingest-cache-actor")


def chat_get_or_create(
    *,
    channel: str,
    chat_id: object,
    thread_id: object | None = None,
    kind: str | None = None,
    title: str = "",
) -> tuple[Chat, bool]:
    """Return the chat for (channel, chat_id, thread_id), creating it once even under races."""
    try:
        chat_key = make_chat_key(channel, chat_id, thread_id)
    except InvalidKey as exc:
        raise IngestError("chat_id", str(exc)) from exc
    if kind is not None and kind not in ChatKind.values:
        raise IngestError("kind", f"kind must be one of {', '.join(ChatKind.values)}")
    clean_title = _clean_name(title, "title", MAX_TITLE) if title else ""
    chat, created = _chats.get(chat_key), False
    if chat is None:
        thread = "" if thread_id in (None, "") else str(thread_id)
        chat, created = Chat.objects.get_or_create(
            chat_key=chat_key,
            defaults={
                "channel": channel,
                "external_id": str(chat_id),
                "thread_id": thread,
                "kind": kind or _infer_kind(channel, thread),
                "title": clean_title,
            },
        )
    if not created and clean_title and clean_title != chat.title:
        Chat.objects.filter(pk=chat.pk).update(title=clean_title)
        chat.title = clean_title
    _chats.put(chat_key, chat)
    return chat, created


def actor_get_or_create(
    *,
    channel: str,
    user_id: object,
    display_name: str = "",
    person: AbstractBaseUser | None = None,
    refresh: bool = True,
    namespace: str = "",
) -> Actor:
    """Return the actor for (channel, namespace, user_id); with `refresh`, keep its display
    name current and link `person` if it has none yet."""
    try:
        validate_channel(channel)
        external_id = validate_id(user_id, "user_id")
    except InvalidKey as exc:
        raise IngestError("user_id", str(exc)) from exc
    name = _clean_name(display_name, "user_name", MAX_DISPLAY_NAME) or external_id
    key = (channel, namespace, external_id)
    actor = _actors.get(key)
    if actor is None:
        actor, _ = Actor.objects.get_or_create(
            channel=channel,
            namespace=namespace,
            external_id=external_id,
            defaults={"display_name": name, "person": person},
        )
        _actors.put(key, actor)
    if refresh:
        actor = actor_refresh(actor=actor, display_name=display_name, person=person)
    return actor


def actor_refresh(
    *, actor: Actor, display_name: str = "", person: AbstractBaseUser | None = None
) -> Actor:
    """Follow the platform's display name and link a Person the actor does not have yet."""
    name = _clean_name(display_name, "user_name", MAX_DISPLAY_NAME)
    changes = {}
    if name and actor.display_name != name:
        changes["display_name"] = name
    if person is not None and actor.person_id is None:
        changes["person"] = person
    if changes:
        Actor.objects.filter(pk=actor.pk).update(**changes, updated_at=timezone.now())
        for field, value in changes.items():
            setattr(actor, field, value)
        _actors.put(_actor_cache_key(actor), actor)
    return actor


def _actor_cache_key(actor: Actor) -> tuple[str, str, str]:
    return (actor.channel, actor.namespace, actor.external_id)


def person_actor_id(person: AbstractBaseUser) -> str:
    """The external id of a Person's own actor on the channels whose users are dashboard
    people (web, terminal): their Person id, never their username, which can be reused."""
    return str(person.pk)


def actor_link(*, actor: Actor, person: AbstractBaseUser) -> Actor:
    """Link `actor` to `person` (replacing an earlier link); listeners hear `actor_linked`
    after commit, so memory about the actor can follow the Person."""
    with transaction.atomic():
        locked = Actor.objects.select_for_update().get(pk=actor.pk)
        previous_id = locked.person_id
        if previous_id != person.pk:
            Actor.objects.filter(pk=locked.pk).update(person=person, updated_at=timezone.now())
        locked.person = person
        _actors.put(_actor_cache_key(locked), locked)

        def announce() -> None:
            previous = None
            if previous_id is not None and previous_id != person.pk:
                previous = type(person)._default_manager.filter(pk=previous_id).first()
            actor_linked.send(sender=Actor, actor=locked, person=person, previous_person=previous)

        transaction.on_commit(announce)
    return locked


def chat_member_ensure(
    *, chat: Chat, person: AbstractBaseUser, role: str = ChatMember.Role.MEMBER
) -> ChatMember:
    """Make `person` a member of `chat` (never downgrades an existing role)."""
    member, _ = ChatMember.objects.get_or_create(chat=chat, person=person, defaults={"role": role})
    return member


class MemberNotFound(Exception):
    """The person is not a member of the chat."""


class LastOwnerError(Exception):
    """The chat's last owner cannot be removed (the message says so, in words for a page)."""


def chat_member_remove(*, chat: Chat, person_id: int, by_role: str | None) -> None:
    """Remove a member, as someone whose role in the chat is `by_role`: only owners remove
    owners, and the last owner stays. Their live connections to the chat are closed."""
    with transaction.atomic():
        # Lock the owners first: two owners removing each other cannot leave none.
        owners = list(
            ChatMember.objects.select_for_update()
            .filter(chat=chat, role=ChatMember.Role.OWNER)
            .values_list("person_id", flat=True)
        )
        membership = ChatMember.objects.filter(chat=chat, person_id=person_id).first()
        if membership is None:
            raise MemberNotFound()
        if membership.role == ChatMember.Role.OWNER:
            if by_role != ChatMember.Role.OWNER:
                raise PermissionDenied("Only owners remove owners.")
            if len(owners) <= 1:
                raise LastOwnerError(
                    "The last owner cannot be removed: make someone else an owner first."
                )
        membership.delete()  # the post_delete receiver closes the person's sockets


def message_ingest(
    *,
    channel: str,
    chat_id: object,
    user_id: object | None,
    text: str,
    message_id: object | None = None,
    user_name: str = "",
    thread_id: object | None = None,
    chat_kind: str | None = None,
    chat_title: str = "",
    role: str = Message.Role.USER,
    parts: list | None = None,
    source_ts: datetime | None = None,
    reply_to_message_id: object | None = None,
    metadata: dict | None = None,
    person: AbstractBaseUser | None = None,
    member: AbstractBaseUser | None = None,
    actor_namespace: str = "",
) -> IngestResult:
    """Store one message exactly once per (chat, message_id).

    Resolves or creates the Chat and Actor (`user_id` within `actor_namespace`), counts
    tokens once, bumps the chat's last activity. A redelivery returns the stored row with
    `duplicate=True` and changes nothing. Safe under concurrent deliveries of the same
    message. `person` links a newly seen actor to a Person; `member` is made a member of
    the chat. Adapters decide who may speak as whom; this service stores what they decided.
    """
    text = validate_text(text)
    if role not in Message.Role.values:
        raise IngestError("role", f"role must be one of {', '.join(Message.Role.values)}")
    if parts is not None and not isinstance(parts, list):
        raise IngestError("parts", "parts must be a list")
    if metadata is not None and not isinstance(metadata, dict):
        raise IngestError("metadata", "metadata must be an object")
    if message_id is None:
        external_id = f"hermes-{uuid.uuid4().hex}"
    else:
        try:
            external_id = validate_id(message_id, "message_id")
        except InvalidKey as exc:
            raise IngestError("message_id", str(exc)) from exc
    if source_ts is not None and timezone.is_naive(source_ts):
        raise IngestError("ts", "timestamps must carry a time zone")
    # Validate the author before anything is created: a refused message leaves no empty chat.
    if user_id is not None:
        try:
            validate_id(user_id, "user_id")
        except InvalidKey as exc:
            raise IngestError("user_id", str(exc)) from exc
    _clean_name(user_name, "user_name", MAX_DISPLAY_NAME)

    for attempt in (1, 2):
        try:
            return _ingest_once(
                channel=channel,
                chat_id=chat_id,
                user_id=user_id,
                user_name=user_name,
                thread_id=thread_id,
                chat_kind=chat_kind,
                chat_title=chat_title,
                person=person,
                member=member,
                actor_namespace=actor_namespace,
                fields={
                    "role": role,
                    "text": text,
                    "parts": parts or [],
                    "external_id": external_id,
                    "source_ts": source_ts,
                    "metadata": metadata or {},
                },
                reply_to_message_id=reply_to_message_id,
            )
        except _StaleCache:
            clear_ingest_caches()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _StaleCache(Exception):
    pass


def _ingest_once(
    *,
    channel,
    chat_id,
    user_id,
    user_name,
    thread_id,
    chat_kind,
    chat_title,
    person,
    member,
    actor_namespace,
    fields,
    reply_to_message_id,
) -> IngestResult:
    chat, _ = chat_get_or_create(
        channel=channel, chat_id=chat_id, thread_id=thread_id, kind=chat_kind, title=chat_title
    )
    actor = None
    if user_id is not None:
        # The profile is refreshed only for a new message: a redelivery changes nothing.
        actor = actor_get_or_create(
            channel=channel,
            user_id=user_id,
            display_name=user_name,
            refresh=False,
            namespace=actor_namespace,
        )
    reply_to = None
    if reply_to_message_id is not None:
        reply_to = Message.objects.filter(chat=chat, external_id=str(reply_to_message_id)).first()

    now = timezone.now()
    message = Message(
        chat=chat,
        actor=actor,
        created_at=now,
        token_count=message_token_count(fields["text"], fields["parts"]),
        reply_to=reply_to,
        **fields,
    )
    try:
        with transaction.atomic():
            # Not save(): on this hot path its machinery cost as much as SQLite's own work. A
            # database trigger bumps the chat's last activity.
            insert_row(message)
            if actor is not None:
                actor = actor_refresh(actor=actor, display_name=user_name, person=person)
                message.actor = actor
            for linked in {p.pk: p for p in (member, actor and actor.person) if p}.values():
                chat_member_ensure(chat=chat, person=linked)
    except IntegrityError as exc:
        # A delivery of the same message won (a redelivery, or a concurrent one): its row.
        existing = (
            Message.objects.select_related("actor")
            .filter(chat=chat, external_id=fields["external_id"])
            .first()
        )
        if existing is None:
            raise _StaleCache() from exc  # e.g. the cached chat was deleted meanwhile
        existing.chat = chat
        return IngestResult(message=existing, created=False)
    return IngestResult(message=message, created=True)


def message_append(
    *,
    chat: Chat,
    role: str,
    text: str,
    parts: list | None = None,
    metadata: dict | None = None,
    actor: Actor | None = None,
    reply_to: Message | None = None,
) -> Message:
    """Append a message the hub itself produced (agent replies, tool results, notices).

    It gets a fresh internal message id, its token count, and bumps the chat's activity."""
    text = validate_text(text)
    return Message.objects.create(
        chat=chat,
        actor=actor,
        role=role,
        text=text,
        parts=parts or [],
        external_id=f"hermes-{uuid.uuid4().hex}",
        created_at=timezone.now(),
        token_count=message_token_count(text, parts),
        reply_to=reply_to,
        metadata=metadata or {},
    )


def message_record_edit(
    *, message: Message, text: str, parts: list | None = None, source_ts: datetime | None = None
) -> MessageEdit | None:
    """Record a platform edit: the row shows the new text, the edit keeps before and after.

    Returns None when the text did not change (a redelivered edit is stored once)."""
    text = validate_text(text)
    with transaction.atomic():
        locked = Message.objects.select_for_update().get(pk=message.pk)
        new_parts = parts if parts is not None else locked.parts
        if locked.text == text and locked.parts == new_parts:
            return None
        edit = MessageEdit.objects.create(
            message=locked,
            previous_text=locked.text,
            previous_parts=locked.parts,
            new_text=text,
            new_parts=new_parts,
            source_ts=source_ts,
        )
        locked.text = text
        locked.parts = new_parts
        locked.token_count = message_token_count(text, new_parts)
        locked.edited_at = edit.recorded_at
        locked.save(update_fields=["text", "parts", "token_count", "edited_at"])
    message.refresh_from_db()
    return edit


def chat_reset(*, chat: Chat, actor: Actor | None = None) -> Message:
    """Append a reset marker: later context starts after it; history before it is kept."""
    return Message.objects.create(
        chat=chat,
        actor=actor,
        role=Message.Role.MARKER,
        text="",
        external_id=f"hermes-reset-{uuid.uuid4().hex}",
        created_at=timezone.now(),
        metadata={"marker": "reset"},
    )


TOKEN_PREFIX = "hh_"
PERSONAL_KEY_PREFIX = "hk_"


def api_token_create(
    *,
    person: AbstractBaseUser,
    name: str = "",
    kind: str = ApiToken.Kind.INTEGRATION,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create an API token (or, with `kind` personal, a personal key) for `person`; the raw
    value is returned once and never stored."""
    if kind not in ApiToken.Kind.values:
        raise ValueError(f"kind must be one of {', '.join(ApiToken.Kind.values)}")
    prefix = PERSONAL_KEY_PREFIX if kind == ApiToken.Kind.PERSONAL else TOKEN_PREFIX
    raw = prefix + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        person=person,
        kind=kind,
        name=name[:100],
        prefix=raw[:10],
        key_hash=hash_api_token(raw),
        expires_at=expires_at,
    )
    return token, raw


def api_token_revoke(*, token: ApiToken) -> None:
    """Revoke a token; requests with it get 401 from then on."""
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
