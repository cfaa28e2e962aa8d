"""History as the context builder reads it: where it starts (summary, reset markers), the
stored rows newest first in budget-sized batches, and grouped into units (a tool-calling
assistant message with its results is one unit) that become request items.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import Q, TextField
from django.db.models.functions import Cast

from chats.agent.convert import (
    StoredMessage,
    content_pieces,
    flatten_tool_group,
    message_extras,
    missing_result_message,
    openai_role,
)
from chats.agent.counting import _Item
from chats.models import Chat, Message


@dataclass(slots=True, eq=False)
class _Unit:
    """A message, or a tool-calling assistant message with its results, as found in history."""

    anchor: int  # id of the first message: where the unit sits in the conversation
    rows: list[StoredMessage]
    call: StoredMessage | None = None
    orphan: bool = False  # a tool result whose call is not in this history: never sent


@dataclass(frozen=True)
class HistoryBounds:
    """Where the history for a trigger starts and ends, and the summary standing in for it."""

    marker_id: int | None  # the reset marker the history starts after, if that bounds it
    end_id: int | None  # the first reset marker after the trigger
    summary: StoredMessage | None  # the summary covering the most of the history
    start_id: int  # history is what comes after this id (summary end, or marker, or 0)


def history_bounds(chat: Chat, *, before_id: int | None = None) -> HistoryBounds:
    """The newest valid summary and the reset markers that matter, read newest first.

    A summary is valid if it ends before `before_id` (the trigger) and no reset marker
    follows its range before the trigger; compression never lets a summary span a reset.
    Markers are looked up only after the summary's range, so a long covered history is
    never scanned."""
    limit = before_id if before_id is not None else float("inf")
    summaries = (
        Message.objects.filter(chat=chat, role=Message.Role.SUMMARY)
        .order_by("-id")
        .values_list("id", "text", "metadata", "token_count")
    )
    summary = None
    # The newest summary is almost always the one (LIMIT 1 stops the scan at once); older
    # ones are read only when it ends after the trigger (a turn rebuilt for an old message).
    for rows in (summaries[:1], summaries[1:]):
        for message_id, text, metadata, token_count in rows:
            metadata = metadata if isinstance(metadata, dict) else {}
            covers_from = metadata.get("covers_from_id")
            covers_to = metadata.get("covers_to_id")
            if isinstance(covers_from, int) and isinstance(covers_to, int) and covers_to < limit:
                summary = StoredMessage(
                    message_id, Message.Role.SUMMARY, text, [], metadata, token_count
                )
                break
        if summary is not None:
            break
    lower = summary.metadata["covers_to_id"] if summary else 0
    resets = [
        message_id
        for message_id, metadata in Message.objects.filter(
            chat=chat, role=Message.Role.MARKER, id__gt=lower
        ).values_list("id", "metadata")
        if isinstance(metadata, dict) and metadata.get("marker") == "reset"
    ]
    marker_id = max((marker for marker in resets if marker < limit), default=None)
    end_id = min((marker for marker in resets if marker > limit), default=None)
    if marker_id is not None:  # a reset after the summary's range: the summary is gone too
        return HistoryBounds(marker_id, end_id, None, marker_id)
    if summary is None:
        return HistoryBounds(None, end_id, None, 0)
    return HistoryBounds(None, end_id, summary, lower)


# Shared, never modified: most rows carry no parts and no metadata, and not allocating a
# fresh empty container per row keeps the garbage collector out of the way.
_NO_PARTS: list = []
_NO_METADATA: dict = {}


def _json(raw: str | None, empty: list | dict):
    """JSON read as text and parsed only when not empty (`empty` is returned as is)."""
    if not raw or raw in ("{}", "[]", "null"):
        return empty
    value = json.loads(raw)
    return value if isinstance(value, type(empty)) else empty


class _HistoryScan:
    """History rows newest first, fetched in batches sized to what the budget can still use."""

    FIRST_BATCH = 64
    MAX_BATCH = 2000
    FIELDS = (
        "id",
        "role",
        "text",
        "parts_text",
        "metadata_text",
        "token_count",
        "actor__display_name",
    )

    def __init__(
        self,
        chat: Chat,
        *,
        start_id: int,
        trigger_id: int,
        end_id: int | None,
        turn,
        only_ids: frozenset[int] | None = None,
    ):
        rows = Message.objects.filter(chat=chat, id__gt=start_id).exclude(
            role__in=(Message.Role.SUMMARY, Message.Role.MARKER)
        )
        if only_ids is not None:  # a narrowed history (registry.HistoryScope)
            rows = rows.filter(id__in=sorted(only_ids))
        # Replies to earlier triggers finished after this trigger arrived (queue mode, an
        # interrupted partial reply) belong before it; later user messages do not.
        rows = rows.filter(
            Q(id__lt=trigger_id)
            | Q(id__gt=trigger_id, role__in=(Message.Role.ASSISTANT, Message.Role.TOOL))
        )
        if end_id is not None:
            rows = rows.filter(id__lt=end_id)
        self.queryset = rows.annotate(
            parts_text=Cast("parts", TextField()), metadata_text=Cast("metadata", TextField())
        )
        self.turn_id = getattr(turn, "pk", None)
        self.wanted = self.FIRST_BATCH  # the consumer's estimate of rows it can still use
        self.exhausted = False

    def __iter__(self) -> Iterator[StoredMessage]:
        before = None
        while True:
            size = max(32, min(self.MAX_BATCH, self.wanted))
            rows = self.queryset if before is None else self.queryset.filter(id__lt=before)
            batch = list(rows.order_by("-id").values_list(*self.FIELDS)[:size])
            for row in batch:
                id_, role, text, parts, metadata, token_count, actor_name = row
                message = StoredMessage(
                    id_,
                    role,
                    text or "",
                    _json(parts, _NO_PARTS),
                    _json(metadata, _NO_METADATA),
                    token_count or 0,
                    actor_name or "",
                )
                if self.turn_id is not None and message.turn_id == self.turn_id:
                    continue  # this turn's own steps are appended by the turn loop
                if message.metadata.get("notice"):
                    continue  # a notice for people (e.g. "Saved for review: …"), not the model
                yield message
            if len(batch) < size:
                self.exhausted = True
                return
            before = batch[-1][0]


class _Grouper:
    """Units newest first (by where they start): a tool result is held until its call."""

    def __init__(self, rows: Iterator[StoredMessage]):
        self.rows = rows
        self.pending: dict[str, StoredMessage] = {}  # results seen before (newer than) their call

    def __iter__(self) -> Iterator[_Unit]:
        pending = self.pending
        for row in self.rows:
            if row.role == Message.Role.TOOL:
                call_id = row.tool_call_id
                if call_id and call_id not in pending:
                    pending[call_id] = row
                else:
                    yield _Unit(row.id, [row], orphan=True)
                continue
            calls = row.tool_calls
            if calls:
                results = [
                    pending.pop(str(call["id"])) for call in calls if str(call["id"]) in pending
                ]
                results.sort(key=lambda result: result.id)
                yield _Unit(row.id, [row, *results], call=row)
            else:
                yield _Unit(row.id, [row])
        while pending:
            row = pending.pop(max(pending, key=lambda key: pending[key].id))
            yield _Unit(row.id, [row], orphan=True)


def _text_tokens(row: StoredMessage, body: str) -> int | None:
    """The cached count of the row's text, when it is one: `token_count` is counted once at
    write time over the text plus any structured parts (tool calls), so rows with parts or
    a body other than the stored text are counted afresh."""
    if body != row.text or row.parts:
        return None
    return row.token_count


def _unit_items(unit: _Unit, *, shared: bool, supports_tools: bool) -> list[_Item]:
    if unit.call is None:
        row = unit.rows[0]
        prefix, body, suffix = content_pieces(row, shared=shared)
        return [
            _Item.from_pieces(
                openai_role(row),
                prefix,
                body,
                suffix,
                body_tokens=_text_tokens(row, body),
                source_id=row.id,
            )
        ]
    call, results = unit.call, unit.rows[1:]
    if not supports_tools:
        text = flatten_tool_group(call, results)
        return [_Item.from_pieces("assistant", "", text, "", source_id=call.id)]
    items = [
        _Item.from_pieces(
            "assistant",
            "",
            call.text,
            "",
            body_tokens=_text_tokens(call, call.text),
            extras=message_extras(call),
            source_id=call.id,
        )
    ]
    answered = set()
    for result in results:
        answered.add(result.tool_call_id)
        items.append(
            _Item.from_pieces(
                "tool",
                "",
                result.text,
                "",
                body_tokens=_text_tokens(result, result.text),
                extras=message_extras(result),
                source_id=result.id,
            )
        )
    for entry in message_extras(call)["tool_calls"]:
        if entry["id"] not in answered:
            items.append(_Item.from_dict(missing_result_message(entry["id"])))
    return items
