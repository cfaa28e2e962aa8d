"""Writes of the OpenAI-compatible endpoint: a person's conversation lands in a chat once.

Who speaks (docs/SECURITY.md): only the key's person, through the `openai` channel, as the
actor (`openai`, "", their Person id) linked to them. Which chat:

- a chat the request names (`X-Hermes-Chat`, `metadata.chat`): a web room the person is a
  member of (their message is stored as their web actor's, marked `via: openai`), or
  another of their own `openai` chats; never a Telegram, terminal or API chat (403), and a
  chat they cannot read is 404. Only the conversation's last user message is stored there.
- else one `openai` chat per conversation, recognised by its prefixes (`openai_api.models`):
  only the new tail is stored; an earlier message that differs forks a new chat.

Each stored message's id is derived from its prefix digest, so a retried request stores
nothing twice and follows the turn its first delivery started.
"""

import uuid
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from chats.agent.holds import turn_hold_held
from chats.agent.turns import message_received, turn_request
from chats.extras import message_texts
from chats.models import Channel, Chat, ChatKind, ChatMember, Message, Turn
from chats.selectors import chat_for_person, chat_may_post
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest, person_actor_id
from openai_api.content_parts import ResolvedParts, content_parts_store
from openai_api.digests import chain, prefix_digests
from openai_api.models import Conversation, ConversationPrefix
from openai_api.parsing import ConversationRequest

MAX_NOTE_CHARS = 8000
TITLE_CHARS = 60
NAMEABLE_CHANNELS = (Channel.WEB, Channel.OPENAI)


class ChatNotAllowed(Exception):
    """The named chat exists and is readable, but a personal key may not post there."""


class ChatNotFound(Exception):
    """No chat with this key is readable by the person."""


@dataclass(frozen=True)
class Landed:
    """Where the request's last user message is, and the turn answering it."""

    chat: Chat
    trigger: Message
    turn: Turn | None
    new: bool = False  # the turn was requested by this call (not a retry's earlier one)
    # The message's turn is held back (its files are still being read: chats.agent.holds);
    # the endpoint follows the turn the hold's release requests (`turn` is None until then).
    held: bool = False


def _author(person: AbstractBaseUser) -> str:
    return person.get_full_name() or person.get_username()


def _ingest_items(*, person, chat: Chat, items, digests, start: int) -> Message:
    """Store items[start:] in `chat` (an `openai` chat), each once; the last one's row."""
    last = None
    for index in range(start, len(items)):
        role, text = items[index]
        digest = digests[index + 1]
        result = message_ingest(
            channel=Channel.OPENAI,
            chat_id=chat.external_id,
            user_id=person_actor_id(person) if role == "user" else None,
            user_name=_author(person),
            person=person if role == "user" else None,
            member=person,
            role=Message.Role.USER if role == "user" else Message.Role.ASSISTANT,
            text=text,
            message_id=f"oa-{digest[:40]}",
            metadata={"openai_digest": digest},
        )
        ConversationPrefix.objects.update_or_create(
            person=person, digest=digest, defaults={"chat": chat, "length": index + 1}
        )
        last = result
    return last


def _title(items) -> str:
    """The conversation's first words, so the dashboard's chat list says which one it is."""
    first = next((text for role, text in items if role == "user"), "")
    words = " ".join(first.split())
    return words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1] + "…"


def _new_chat(person, *, items, forked_from: Chat | None) -> tuple[Chat, Conversation]:
    chat, _ = chat_get_or_create(
        channel=Channel.OPENAI, chat_id=uuid.uuid4().hex, kind=ChatKind.API, title=_title(items)
    )
    chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
    conversation = Conversation.objects.create(chat=chat, person=person, forked_from=forked_from)
    return chat, conversation


def _find(person, digests) -> tuple[Conversation | None, int]:
    """The conversation holding the longest known prefix of the request, and its length."""
    known = dict(
        ConversationPrefix.objects.filter(person=person, digest__in=digests[1:]).values_list(
            "digest", "chat_id"
        )
    )
    for length in range(len(digests) - 1, 0, -1):
        chat_id = known.get(digests[length])
        if chat_id is None:
            continue
        conversation = (
            Conversation.objects.select_for_update()
            .select_related("chat")
            .filter(chat_id=chat_id, person=person)
            .first()
        )
        if conversation is not None:
            return conversation, length
    return None, 0


def _one_at_a_time(person) -> None:
    """Hold the person's row until the transaction ends, so that two requests of the same
    person land one after the other: a client sending a new conversation twice at once
    (a retry racing the first delivery) stores it once, and the second request finds the
    first one's turn and follows it. SQLite's writers already queue at BEGIN IMMEDIATE."""
    list(get_user_model().objects.select_for_update().filter(pk=person.pk).values_list("pk"))


def _trigger_turn(result_message: Message) -> Turn | None:
    return Turn.objects.filter(trigger=result_message).order_by("-id").first()


def _retry(chat: Chat, digest: str) -> Landed | None:
    """The same request again before an answer was recorded: follow its turn while it runs
    (or once it completed); after a failure or an interruption, answer it again."""
    trigger = Message.objects.filter(chat=chat, external_id=f"oa-{digest[:40]}").first()
    if trigger is None:
        return None
    turn = _trigger_turn(trigger)
    if turn is not None and (not turn.is_finished or turn.status == Turn.Status.COMPLETED):
        return Landed(chat, trigger, turn)
    if turn is None and turn_hold_held(trigger.pk):  # its files are still being read
        return Landed(chat, trigger, None, held=True)
    return Landed(chat, trigger, turn_request(message=trigger), new=True)


def _store_parts(result, parts: ResolvedParts) -> None:
    """The last user message's images and files, on it, when this request stored it (a
    retry stored them the first time). A refusal (ContentPartRefused) rolls back the whole
    request: the client gets an error and nothing is half stored."""
    if parts and result.created and result.message.role == Message.Role.USER:
        content_parts_store(result.message, parts)


def _held(result) -> bool:
    """Whether storing the message's parts held its turn (a file still being read)."""
    return bool(result.created) and turn_hold_held(result.message.pk)


def conversation_post(
    *, person: AbstractBaseUser, request: ConversationRequest, parts: ResolvedParts | None = None
) -> Landed:
    """Store what is new in the person's conversation (the last user message with its
    resolved `parts`) and request the agent's turn on that message (a retried request finds
    the turn its first delivery started)."""
    parts = parts or ResolvedParts()
    if request.chat_key is not None:
        return _post_to_named_chat(person=person, request=request, parts=parts)
    items = request.items
    digests = prefix_digests(items, request.fingerprints)
    with transaction.atomic():
        _one_at_a_time(person)
        conversation, length = _find(person, digests)
        if conversation is not None and length == len(items):
            if conversation.tip_digest == digests[-1]:
                retried = _retry(conversation.chat, digests[-1])
                if retried is not None:
                    return retried
            # A regenerate: answer the last message again, in a fork.
            conversation, length = _find(person, digests[:-1])
        if conversation is not None and conversation.tip_digest == digests[length]:
            chat, start = conversation.chat, length
        else:
            chat, conversation = _new_chat(
                person, items=items, forked_from=conversation.chat if conversation else None
            )
            start = 0
        note = request.system[:MAX_NOTE_CHARS]
        if note != conversation.system_note:
            conversation.system_note = note
        conversation.tip_digest = digests[-1]
        conversation.save(update_fields=["system_note", "tip_digest"])
        last = _ingest_items(person=person, chat=chat, items=items, digests=digests, start=start)
        _store_parts(last, parts)
        held = _held(last)
        turn = message_received(last, held=held)
        if turn is None:
            return Landed(chat, last.message, _trigger_turn(last.message), new=held, held=held)
        return Landed(chat, last.message, turn, new=True)


def _post_to_named_chat(*, person, request: ConversationRequest, parts: ResolvedParts) -> Landed:
    chat = chat_for_person(person, request.chat_key)
    if chat is None:
        raise ChatNotFound(request.chat_key)
    if chat.channel not in NAMEABLE_CHANNELS or not chat_may_post(person, chat):
        raise ChatNotAllowed(chat.channel)
    conversation = None
    if chat.channel == Channel.OPENAI:
        conversation = Conversation.objects.filter(chat=chat, person=person).first()
        if conversation is None:
            raise ChatNotAllowed(chat.channel)
    digest = prefix_digests(request.items, request.fingerprints)[-1]
    with transaction.atomic():
        _one_at_a_time(person)
        retried = _unanswered(chat, digest, person)
        if retried is not None:  # the same request again while its turn runs: follow it
            turn = _trigger_turn(retried)
            return Landed(chat, retried, turn, held=turn is None and turn_hold_held(retried.pk))
        metadata = {"openai_digest": digest}
        if chat.channel == Channel.WEB:
            metadata["via"] = "openai"
        if conversation is not None:
            conversation.tip_digest = digest
            if request.system:
                conversation.system_note = request.system[:MAX_NOTE_CHARS]
            conversation.save(update_fields=["tip_digest", "system_note"])
        result = message_ingest(
            channel=chat.channel,
            chat_id=chat.external_id,
            thread_id=chat.thread_id or None,
            user_id=person_actor_id(person),
            user_name=_author(person),
            person=person,
            text=request.items[-1][1],
            # A named chat has its own history: the same words may come again later, so the
            # id is new each time; a retry is recognised by `_unanswered` instead.
            message_id=f"oa-{digest[:40]}-{uuid.uuid4().hex[:12]}",
            metadata=metadata,
        )
        _store_parts(result, parts)
        held = _held(result)
        turn = message_received(result, held=held)
        return Landed(result.chat, result.message, turn, new=turn is not None or held, held=held)


def _unanswered(chat: Chat, digest: str, person) -> Message | None:
    """The newest message this request already stored in `chat`, if its turn is still open.
    Only the person's own: in a room another member may send the same words meanwhile."""
    message = (
        Message.objects.filter(
            chat=chat, external_id__startswith=f"oa-{digest[:40]}-", actor__person=person
        )
        .order_by("-id")
        .first()
    )
    if message is None:
        return None
    turn = _trigger_turn(message)
    if turn is None:  # held while its files are read: still open
        return message if turn_hold_held(message.pk) else None
    return message if not turn.is_finished else None


STEP_SEPARATOR = "\n\n"


def visible_answer(turn: Turn, *, person) -> str:
    """The answer as an OpenAI client of `person` sees it: the text the agent wrote before
    each of its tool steps, then its reply, in order (the stream sends the same). Stored
    apart in the chat, they are one assistant message to the client. Each as `person`
    reads it (chats.extras.message_texts: a knowledge citation names its passage only to a
    reader of the collection); the stored texts are unchanged."""
    if turn.reply is None:
        return ""
    steps = list(
        Message.objects.filter(
            chat_id=turn.chat_id, role=Message.Role.ASSISTANT, metadata__turn=turn.pk
        )
        .exclude(pk=turn.reply_id)
        .exclude(text="")
        .order_by("id")
    )
    messages = [*steps, turn.reply]
    texts = message_texts(messages, person)
    return STEP_SEPARATOR.join(t for m in messages if (t := texts.get(m.pk, m.text)))


def conversation_record_reply(*, turn: Turn) -> None:
    """After a turn in an `openai` chat finished with a reply: the conversation's tip moves
    past that reply, so the client resending it continues this chat instead of forking."""
    reply = turn.reply
    if reply is None or turn.chat.channel != Channel.OPENAI:
        return
    digest = (turn.trigger.metadata or {}).get("openai_digest")
    if not digest:
        return
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().filter(chat_id=turn.chat_id).first()
        if conversation is None or conversation.tip_digest != digest:
            return  # something newer came meanwhile: that is the tip now
        # The answer as the conversation's person got it: the text their client resends.
        tip = chain(digest, "assistant", visible_answer(turn, person=conversation.person))
        length = (
            ConversationPrefix.objects.filter(person=conversation.person, digest=digest)
            .values_list("length", flat=True)
            .first()
        )
        ConversationPrefix.objects.update_or_create(
            person=conversation.person,
            digest=tip,
            defaults={"chat_id": turn.chat_id, "length": (length or 0) + 1},
        )
        conversation.tip_digest = tip
        conversation.save(update_fields=["tip_digest"])
