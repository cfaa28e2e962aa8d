"""The files behind the agent's work, for `chats.work_sources` (registered in
AttachmentsConfig.ready()): memory and skill proposals keep them as their sources.

- In a chat turn: the files on the message it answers (`how: "attached"`) and the files of
  this chat it read with `attachment_read` in that turn (`how: "read"`, from the turn's
  stored tool-call steps).
- In a background review: every file on the messages of the range it reads, and every file
  read with `attachment_read` in that range (a review reads those turns' tool results).

Only files of the context's chat count (`attachment_read` reads no other chat's files), so
every source's chat is the chat the work was done in. Bounded: at most MAX_STEPS tool-call
steps are read (newest first) and MAX_SOURCES files named; a single one is enough for the
audience rule, the rest are provenance."""

import json

from django.urls import reverse

from attachments.models import Attachment
from chats.agent.registry import ORIGIN_REVIEW, TurnContext
from chats.models import Message

READ_TOOL = "attachment_read"
MAX_STEPS = 200
MAX_SOURCES = 20


def _read_ids(steps) -> set[int]:
    ids: set[int] = set()
    for parts in steps:
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict) or part.get("name") != READ_TOOL:
                continue
            arguments = part.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    continue
            value = arguments.get("attachment_id") if isinstance(arguments, dict) else None
            try:
                ids.add(int(value))
            except (TypeError, ValueError):
                continue
    return ids


def files_behind(context: TurnContext) -> list[dict]:
    """The files the work of `context` may have drawn on (see the module's docstring)."""
    chat = context.chat
    steps = Message.objects.filter(chat=chat, role=Message.Role.ASSISTANT)
    if context.origin == ORIGIN_REVIEW:
        after = context.covers_after_id or 0
        attached = Attachment.objects.filter(message__chat=chat, message_id__gt=after)
        steps = steps.filter(pk__gt=after)
    elif context.trigger is None:  # no message answered (a command): nothing drawn on
        return []
    else:
        attached = Attachment.objects.filter(message_id=context.trigger.pk)
        if context.turn is None or not context.turn.pk:
            steps = steps.none()
        else:
            steps = steps.filter(pk__gt=context.trigger.pk, metadata__turn=context.turn.pk)
    read_ids = _read_ids(steps.order_by("-id").values_list("parts", flat=True)[:MAX_STEPS])
    sources: dict[int, dict] = {}
    fields = ("pk", "name", "message__chat_id")
    for pk, name, chat_id in attached.order_by("id").values_list(*fields)[:MAX_SOURCES]:
        sources[pk] = _source(pk, name, chat_id, "attached")
    if read_ids:
        read = Attachment.objects.filter(pk__in=read_ids, message__chat=chat).order_by("id")
        for pk, name, chat_id in read.values_list(*fields)[:MAX_SOURCES]:
            sources.setdefault(pk, _source(pk, name, chat_id, "read"))
    return list(sources.values())[:MAX_SOURCES]


def _source(pk: int, name: str, chat_id: int, how: str) -> dict:
    # `url`: the dashboard's download, served only to the chat's readers (404 to anyone else).
    url = reverse("attachment_download", args=[pk])
    return {"kind": "file", "id": pk, "name": name, "chat_id": chat_id, "how": how, "url": url}
