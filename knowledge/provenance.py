"""The knowledge collections behind the agent's work, for `chats.work_sources` (registered in
KnowledgeConfig.ready()): memory and skill proposals keep them as their sources, so what a
passage said never reaches a wider audience than its collection's readers (issue 35).

A passage reaches a turn two ways, and both are read from what the turn stored:

- the prompt block (`knowledge.prompt`): the passage ids it offered are in the turn's prompt
  report (`sections[name="knowledge"].details.passages`);
- the `knowledge_search` tool: its stored results (tool messages of the turn) name each
  passage as `"ref": "K<id>"`.

A background review reads every turn after its range's start, so both are read for those
turns. Each source is `{"kind": "collection", "id", "name", "chat_id", "how": "offered" |
"searched", "url", "everyone"}`; `everyone` (the collection's `everyone_may_read`) says it
bounds no audience. Bounded: at most MAX_TURNS prompt reports and MAX_RESULTS tool results
are read (newest first) and MAX_SOURCES collections named."""

import re

from django.urls import reverse

from chats.agent.registry import ORIGIN_REVIEW, TurnContext
from chats.models import Message, Turn
from knowledge.models import Collection, Passage

TOOL = "knowledge_search"
SECTION = "knowledge"
REF = re.compile(r'"ref":\s*"K(\d{1,18})"')
MAX_TURNS = 50
MAX_RESULTS = 100
MAX_SOURCES = 20
MAX_PASSAGES = 5000


def _offered(report) -> set[int]:
    ids: set[int] = set()
    sections = report.get("sections") if isinstance(report, dict) else None
    for section in sections if isinstance(sections, list) else []:
        if not isinstance(section, dict) or section.get("name") != SECTION:
            continue
        details = section.get("details")
        passages = details.get("passages") if isinstance(details, dict) else None
        for value in passages if isinstance(passages, list) else []:
            if isinstance(value, int) and not isinstance(value, bool):
                ids.add(value)
    return ids


def collections_behind(context: TurnContext) -> list[dict]:
    """The collections whose passages reached the work of `context` (see the module)."""
    chat = context.chat
    results = Message.objects.filter(chat=chat, role=Message.Role.TOOL, metadata__tool_name=TOOL)
    if context.origin == ORIGIN_REVIEW:
        after = context.covers_after_id or 0
        results = results.filter(pk__gt=after)
        reports = list(
            Turn.objects.filter(chat=chat, trigger_id__gt=after)
            .order_by("-id")
            .values_list("prompt_report", flat=True)[:MAX_TURNS]
        )
    elif context.trigger is None:  # no message answered (a command): nothing drawn on
        return []
    else:
        turn = context.turn
        if turn is None or not turn.pk:
            results = results.none()
            reports = []
        else:
            results = results.filter(pk__gt=context.trigger.pk, metadata__turn=turn.pk)
            # The turn in memory: its report is set before any tool runs, saved or not.
            reports = [turn.prompt_report]
    offered: set[int] = set()
    for report in reports:
        offered |= _offered(report)
    searched: set[int] = set()
    for text in results.order_by("-id").values_list("text", flat=True)[:MAX_RESULTS]:
        searched |= {int(value) for value in REF.findall(text or "")}
    how = {}
    for ids, label in ((searched, "searched"), (offered, "offered")):
        if not ids:
            continue
        wanted = sorted(ids)[:MAX_PASSAGES]
        for collection_id in (
            Passage.objects.filter(pk__in=wanted).values_list("collection_id", flat=True).distinct()
        ):
            how.setdefault(collection_id, label)
    if not how:
        return []
    collections = Collection.objects.filter(pk__in=how).order_by("id")[:MAX_SOURCES]
    return [_source(collection, chat.pk, how[collection.pk]) for collection in collections]


def _source(collection: Collection, chat_id: int, how: str) -> dict:
    # `url`: the collection's page, which answers only its readers.
    return {
        "kind": "collection",
        "id": collection.pk,
        "name": collection.name,
        "chat_id": chat_id,
        "how": how,
        "url": reverse("knowledge_collection", args=[collection.pk]),
        "everyone": bool(collection.everyone_may_read),
    }


def readable_collection_ids(person, ids) -> set[int]:
    """Of the collections `ids`, those `person` may read (for pages that show sources)."""
    from knowledge.access import collections_readable_by

    ids = [i for i in ids if isinstance(i, int)]
    if not ids or person is None:
        return set()
    return set(collections_readable_by(person).filter(pk__in=ids).values_list("pk", flat=True))
