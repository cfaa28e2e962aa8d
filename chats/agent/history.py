"""History as the context builder reads it: where it starts (summary, reset markers), the
stored rows newest first in budget-sized batches, and grouped into units (a tool-calling
assistant message with its results is one unit) that become request items.
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from chats.agent import rowcache
from chats.agent.convert import (
    StoredMessage,
    content_pieces,
    flatten_tool_group,
    message_extras,
    missing_result_message,
    openai_role,
    speaker_prefix,
)
from chats.agent.counting import _NO_EXTRAS, MESSAGE_OVERHEAD, _Item, _joined_tokens
from chats.models import Actor, Chat, Message


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
    summary = None
    # The newest summary is almost always the one (LIMIT 1 stops the scan at once); older
    # ones are read only when it ends after the trigger (a turn rebuilt for an old message).
    newest = _fetch(_sql("newest_summary"), [chat.pk, Message.Role.SUMMARY])
    for rows in (newest, _older_summaries(chat)):
        for message_id, text, metadata_text, token_count in rows:
            metadata = _json(metadata_text, _NO_METADATA)
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
        for message_id, metadata in _fetch(_sql("markers"), [chat.pk, Message.Role.MARKER, lower])
        if _json(metadata, _NO_METADATA).get("marker") == "reset"
    ]
    marker_id = max((marker for marker in resets if marker < limit), default=None)
    end_id = min((marker for marker in resets if marker > limit), default=None)
    if marker_id is not None:  # a reset after the summary's range: the summary is gone too
        return HistoryBounds(marker_id, end_id, None, marker_id)
    if summary is None:
        return HistoryBounds(None, end_id, None, 0)
    return HistoryBounds(None, end_id, summary, lower)


def _older_summaries(chat: Chat) -> Iterator[tuple]:
    """The chat's summaries but the newest, newest first, as the newest's query reads them:
    a generator, so its queryset is built (a cost on every turn) only when the newest summary
    does not apply."""
    rows = (
        Message.objects.filter(chat=chat, role=Message.Role.SUMMARY)
        .order_by("-id")
        .values_list("id", "text", "metadata", "token_count")[1:]
    )
    for message_id, text, metadata, token_count in rows:
        yield message_id, text, json.dumps(metadata), token_count


# --- SQL ---------------------------------------------------------------------------------
# The queries of every turn are written out once rather than built by the ORM on each call:
# compiling a queryset costs more CPU than SQLite or PostgreSQL spends running it, and the
# builder runs before every model request. JSON columns are read as text and parsed only
# when not empty (`_json`). Plain SQL that both backends accept; names from the models.

_SQL: dict[tuple[str, str], str] = {}


def _sql(name: str) -> str:
    key = (connection.vendor, name)
    sql = _SQL.get(key)
    if sql is None:
        sql = _SQL[key] = _SQL_BUILDERS[name](connection.ops.quote_name)
    return sql


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _message_columns(quote) -> dict[str, str]:
    table = quote(Message._meta.db_table)
    return {
        name: f"{table}.{quote(Message._meta.get_field(name).column)}"
        for name in ("chat", "role", "text", "parts", "metadata", "token_count", "actor")
    } | {"table": table, "id": f"{table}.{quote(Message._meta.pk.column)}"}


def _newest_summary_sql(quote) -> str:
    m = _message_columns(quote)
    return (
        f"SELECT {m['id']}, {m['text']}, CAST({m['metadata']} AS text), {m['token_count']} "
        f"FROM {m['table']} WHERE {m['chat']} = %s AND {m['role']} = %s "
        f"ORDER BY {m['id']} DESC LIMIT 1"
    )


def _markers_sql(quote) -> str:
    m = _message_columns(quote)
    return (
        f"SELECT {m['id']}, CAST({m['metadata']} AS text) FROM {m['table']} "
        f"WHERE {m['chat']} = %s AND {m['role']} = %s AND {m['id']} > %s"
    )


def _scan_sql(quote) -> str:
    """History rows newest first: the placeholders %(where)s (extra conditions) and
    %(limit)s are filled per batch."""
    m = _message_columns(quote)
    actor = quote(Actor._meta.db_table)
    return (
        f"SELECT {m['id']}, {m['role']}, {m['text']}, CAST({m['parts']} AS text), "
        f"CAST({m['metadata']} AS text), {m['token_count']}, "
        f"{actor}.{quote(Actor._meta.get_field('display_name').column)} "
        f"FROM {m['table']} LEFT OUTER JOIN {actor} "
        f"ON ({m['actor']} = {actor}.{quote(Actor._meta.pk.column)}) "
        f"WHERE {m['chat']} = %s AND {m['id']} > %s AND {m['role']} NOT IN (%s, %s) "
        f"AND ({m['id']} < %s OR ({m['id']} > %s AND {m['role']} IN (%s, %s)))"
        "{where} "
        f"ORDER BY {m['id']} DESC LIMIT %s"
    )


_SQL_BUILDERS = {
    "newest_summary": _newest_summary_sql,
    "markers": _markers_sql,
    "scan": _scan_sql,
}


# Shared, never modified: most rows carry no parts and no metadata, and not allocating a
# fresh empty container per row keeps the garbage collector out of the way.
_NO_PARTS: list = []
_NO_METADATA: dict = {}


_EMPTY_JSON = frozenset((None, "", "{}", "[]", "null"))

# Parsed metadata and parts by their JSON text: the same history is read again on every
# turn, and parsing costs more than the rest of a row. The values are shared and never
# modified (like _NO_METADATA); the texts are the keys, so an edited row is parsed anew.
_PARSED: dict[str, object] = {}
_PARSED_MAX = 8192
_PARSED_TEXT_MAX = 512


def _json(raw: str | None, empty: list | dict):
    """JSON read as text and parsed only when not empty (`empty` is returned as is)."""
    if raw in _EMPTY_JSON:
        return empty
    value = _PARSED.get(raw)
    if value is None:
        value = json.loads(raw)
        if len(raw) <= _PARSED_TEXT_MAX:  # a few MB at most; long tool arguments are parsed
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[raw] = value
    return value if isinstance(value, type(empty)) else empty


class _HistoryScan:
    """History rows newest first, fetched in batches sized to what the budget can still use."""

    FIRST_BATCH = 64
    MAX_BATCH = 2000

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
        # Replies to earlier triggers finished after this trigger arrived (queue mode, an
        # interrupted partial reply) belong before it; later user messages do not.
        self.params = [
            chat.pk,
            start_id,
            Message.Role.SUMMARY,
            Message.Role.MARKER,
            trigger_id,
            trigger_id,
            Message.Role.ASSISTANT,
            Message.Role.TOOL,
        ]
        self.where, self.where_params = "", []
        column = _message_columns(connection.ops.quote_name)["id"]
        if only_ids is not None:  # a narrowed history (registry.HistoryScope)
            ids = sorted(only_ids) or [0]
            self.where += f" AND {column} IN ({', '.join(['%s'] * len(ids))})"
            self.where_params += ids
        if end_id is not None:
            self.where += f" AND {column} < %s"
            self.where_params.append(end_id)
        self.column = column
        self.turn_id = getattr(turn, "pk", None)
        self.wanted = self.FIRST_BATCH  # the consumer's estimate of rows it can still use
        self.exhausted = False
        self.chat_id, self.start_id, self.trigger_id = chat.pk, start_id, trigger_id
        # The whole history (not a narrowed one, not one ending at a later reset) comes from
        # the worker's row cache when it is on; `done()` gives the rows back after the build.
        self.cached = (
            settings.CONTEXT_ROW_CACHE
            and only_ids is None
            and end_id is None
            and not connection.in_atomic_block
        )
        self.rows: rowcache.Rows | None = None

    def done(self) -> None:
        if self.rows is not None:
            self.rows.done()
            self.rows = None

    def _batch(self, before: int | None, size: int) -> list[tuple]:
        where, params = self.where, [*self.params, *self.where_params]
        if before is not None:
            where += f" AND {self.column} < %s"
            params.append(before)
        return _fetch(_sql("scan").replace("{where}", where), [*params, size])

    def __iter__(self) -> Iterator[StoredMessage]:
        if self.cached:
            yield from self._iter_cached()
            return
        before = None
        turn_id = self.turn_id
        empty = _EMPTY_JSON
        while True:
            size = max(32, min(self.MAX_BATCH, self.wanted))
            batch = self._batch(before, size)
            for id_, role, text, parts, metadata, token_count, actor_name in batch:
                if metadata in empty:
                    metadata = _NO_METADATA
                else:
                    metadata = _json(metadata, _NO_METADATA)
                    if metadata.get("notice"):
                        continue  # a notice for people (e.g. "Saved for review: …"), not the model
                    turn = metadata.get("turn")
                    if turn_id is not None and turn == turn_id and isinstance(turn, int):
                        continue  # this turn's own steps are appended by the turn loop
                yield StoredMessage(
                    id_,
                    role,
                    text or "",
                    _NO_PARTS if parts in empty else _json(parts, _NO_PARTS),
                    metadata,
                    token_count or 0,
                    actor_name or "",
                )
            if len(batch) < size:
                self.exhausted = True
                return
            before = batch[-1][0]

    def _iter_cached(self) -> Iterator[StoredMessage]:
        """What `__iter__` yields, from the row cache: the same rows in the same batches
        (the query's conditions applied here), so `exhausted` means what it means there."""
        self.rows = rows = rowcache.Rows(self.chat_id, self.start_id, _stored)
        source = self._matching(rows)
        turn_id = self.turn_id
        while True:
            size = max(32, min(self.MAX_BATCH, self.wanted))
            count = 0
            for row in source:
                count += 1
                metadata = row.metadata
                if not metadata:
                    yield row
                elif not metadata.get("notice"):  # a notice is for people, not the model
                    turn = metadata.get("turn")
                    if turn_id is None or turn != turn_id or not isinstance(turn, int):
                        yield row  # (this turn's own steps are appended by the turn loop)
                if count == size:
                    break
            if count < size:
                self.exhausted = True
                return

    def _matching(self, rows: "rowcache.Rows") -> Iterator[StoredMessage]:
        """The cached rows the scan's query would return, newest first, reading older ones
        as needed."""
        start_id, trigger_id = self.start_id, self.trigger_id
        skipped, later = (Message.Role.SUMMARY, Message.Role.MARKER), _LATER_ROLES
        cached, index = rows.entry.rows, 0
        while True:
            if index == len(cached) and not rows.more(max(64, min(self.MAX_BATCH, self.wanted))):
                return
            row = cached[index]
            index += 1
            id_ = row.id
            if id_ <= start_id:
                return
            role = row.role
            if role in skipped or id_ == trigger_id or (id_ > trigger_id and role not in later):
                continue
            yield row


_LATER_ROLES = (Message.Role.ASSISTANT, Message.Role.TOOL)


def _stored(row: tuple) -> StoredMessage:
    """A fetched history row as the scan yields it (metadata and parts parsed, shared)."""
    id_, role, text, parts, metadata, token_count, actor_name = row
    return StoredMessage(
        id_,
        role,
        text or "",
        _NO_PARTS if parts in _EMPTY_JSON else _json(parts, _NO_PARTS),
        _NO_METADATA if metadata in _EMPTY_JSON else _json(metadata, _NO_METADATA),
        token_count or 0,
        actor_name or "",
    )


class _Grouper:
    """Units newest first (by where they start): a tool result is held until its call. A
    message that is a unit of its own (most of them) comes as its StoredMessage, not wrapped:
    the builder reads hundreds of them before every model request."""

    def __init__(self, rows: Iterator[StoredMessage]):
        self.rows = rows
        self.pending: dict[str, StoredMessage] = {}  # results seen before (newer than) their call

    def __iter__(self) -> Iterator[_Unit | StoredMessage]:
        pending = self.pending
        tool, assistant = Message.Role.TOOL, Message.Role.ASSISTANT
        for row in self.rows:
            role = row.role
            if role == tool:
                call_id = row.tool_call_id
                if call_id and call_id not in pending:
                    pending[call_id] = row
                else:
                    yield _Unit(row.id, [row], orphan=True)
                continue
            calls = row.tool_calls if role == assistant and row.parts else None
            if calls:
                results = [
                    pending.pop(str(call["id"])) for call in calls if str(call["id"]) in pending
                ]
                results.sort(key=lambda result: result.id)
                yield _Unit(row.id, [row, *results], call=row)
            else:
                yield row
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


def unit_rows(unit: _Unit | StoredMessage) -> list[StoredMessage]:
    """The stored messages of what `_Grouper` yields."""
    return [unit] if type(unit) is StoredMessage else unit.rows


_USER, _ASSISTANT = Message.Role.USER, Message.Role.ASSISTANT


# (speaker prefix, text) -> tokens of both joined, for the user messages of shared chats: the
# same history is counted on every turn, and the exact join costs more than the rest of a
# row. Keyed by the texts themselves, so an edit or a rename is counted anew. At most a few
# MB (4,096 texts of up to 1,024 characters; a worker's history window is ~600 rows).
_PREFIXED: dict[tuple[str, str, int], int] = {}
_PREFIXED_MAX = 4096
_PREFIXED_TEXT_MAX = 1024  # longer texts are counted each time rather than held here


def _prefixed_tokens(prefix: str, text: str, text_tokens: int) -> int:
    """Exactly count_tokens(prefix + text), from the text's cached count."""
    key = (prefix, text, text_tokens)
    total = _PREFIXED.get(key)
    if total is None:
        total = _joined_tokens(prefix, text, "", text_tokens)
        if len(text) <= _PREFIXED_TEXT_MAX:
            if len(_PREFIXED) >= _PREFIXED_MAX:
                _PREFIXED.clear()
            _PREFIXED[key] = total
    return total


def _row_item(row: StoredMessage, *, shared: bool) -> _Item:
    """The request item of a message that is a unit of its own: `_Item.from_pieces` of its
    `content_pieces`, written out for the two roles nearly every row has. Its fields depend
    only on the row and `shared`: kept on the row (a cached row is read again next turn);
    each build gets a fresh item, which it may cut."""
    memo = row.item
    if memo is not None and memo[0] is shared:
        return _Item(*memo[1])
    item = _new_row_item(row, shared=shared)
    row.item = (
        shared,
        (
            item.role,
            item.prefix,
            item.body,
            item.suffix,
            item.extras,
            item.body_tokens,
            item.tokens,
            item.source_id,
        ),
    )
    return item


def _new_row_item(row: StoredMessage, *, shared: bool) -> _Item:
    role, text = row.role, row.text
    # The stored text is the body and its cached count is exact (no parts, not empty).
    tokens = row.token_count if text and not row.parts else 0
    if tokens and role == _USER:
        prefix = speaker_prefix(row.actor_name) if shared else ""
        total = _prefixed_tokens(prefix, text, tokens) if shared else tokens
        return _Item(_USER, prefix, text, "", _NO_EXTRAS, tokens, MESSAGE_OVERHEAD + total, row.id)
    if tokens and role == _ASSISTANT and not row.metadata.get("interrupted"):
        return _Item(
            _ASSISTANT, "", text, "", _NO_EXTRAS, tokens, MESSAGE_OVERHEAD + tokens, row.id
        )
    prefix, body, suffix = content_pieces(row, shared=shared)
    return _Item.from_pieces(
        openai_role(row),
        prefix,
        body,
        suffix,
        body_tokens=_text_tokens(row, body),
        source_id=row.id,
    )


def _unit_items(unit: _Unit | StoredMessage, *, shared: bool, supports_tools: bool) -> list[_Item]:
    if type(unit) is StoredMessage:
        return [_row_item(unit, shared=shared)]
    if unit.call is None:
        return [_row_item(unit.rows[0], shared=shared)]
    call, results = unit.call, unit.rows[1:]
    if not supports_tools:
        text = flatten_tool_group(call, results)
        return [_Item.from_pieces("assistant", "", text, "", source_id=call.id)]
    result_ids = tuple(result.id for result in results)
    memo = call.item
    if memo is not None and memo[0] == "tools" and memo[1] == result_ids:
        return _known_tool_items(call, results, memo[2])
    extras = message_extras(call)
    items = [
        _Item.from_pieces(
            "assistant",
            "",
            call.text,
            "",
            body_tokens=_text_tokens(call, call.text),
            extras=extras,
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
    for entry in extras["tool_calls"]:
        if entry["id"] not in answered:
            items.append(_Item.from_dict(missing_result_message(entry["id"])))
    # The counts (tool calls' JSON, texts) depend only on these rows: kept on the call's row
    # for the next turn (the row cache keeps it); the extras are built afresh each time, as
    # their lists go into the request.
    call.item = ("tools", result_ids, tuple((item.body_tokens, item.tokens) for item in items))
    return items


def _known_tool_items(
    call: StoredMessage, results: list[StoredMessage], counts: tuple
) -> list[_Item]:
    """`_unit_items` of a tool group counted before: the same items, the counts reused."""
    extras = message_extras(call)
    body_tokens, tokens = counts[0]
    items = [
        _Item("assistant", "", call.text, "", extras or _NO_EXTRAS, body_tokens, tokens, call.id)
    ]
    answered = set()
    for result, (body_tokens, tokens) in zip(results, counts[1 : 1 + len(results)], strict=True):
        answered.add(result.tool_call_id)
        result_extras = message_extras(result) or _NO_EXTRAS
        items.append(
            _Item("tool", "", result.text, "", result_extras, body_tokens, tokens, result.id)
        )
    for entry in extras["tool_calls"]:  # calls without a result (rare): counted each time
        if entry["id"] not in answered:
            items.append(_Item.from_dict(missing_result_message(entry["id"])))
    return items
