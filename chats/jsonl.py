"""Chat history as JSON Lines (seed 004): one self-contained record per message.

Export writes, in history order (Message id order), everything an identical round trip
needs. Import stores every record through `chats.services.message_ingest`, so
idempotency (one message per chat and `message_id`) and token counting live in one place;
this module only restores what ingestion cannot know (stored-at and edit timestamps) on the
rows it has just created, inside the same transaction.

Record format, version 1 (`v`):

    v             1
    channel       str                    chat_id      str | int
    thread_id     str | int | null       chat_kind    ChatKind value | null (inferred)
    chat_title    str | null             user_id      str | int | null (no actor), required
    user_name     str | null             message_id   str | int
    user_namespace  str, only when the actor has one (an API token owner's users,
                  terminal OS logins, retired web keys): keeps them apart on import
    ts            ISO 8601 with offset: the source timestamp if any, else the stored one
    source_ts     ISO 8601 | null (absent: `ts` is the source timestamp)
    stored_at     ISO 8601 | null (absent: stored now)
    role          Message.Role value     content      str (the text)
    parts         list                   metadata     object
    reply_to      message_id of the replied message in the same chat | null
    edited_at     ISO 8601 | null
    edits         [{previous_text, previous_parts, new_text, new_parts, source_ts,
                    recorded_at}], oldest first; they must lead to `content` and `parts`
    token_count   exported for readers; recomputed on import, never trusted
    <extras>      keys registered by other apps (chats/history_bundle.py), present only on
                  records that have something, e.g. `attachments`: the message's files, whose
                  bytes travel in a bundle (a folder or a tar archive) beside the lines

Required on import: v, channel, chat_id, user_id, message_id, ts, role, content.
Exported timestamps are UTC with a `Z` suffix; imported ones may carry any offset but
never none.
"""

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from django.db import DataError, IntegrityError, transaction
from django.db.models import F, Max, Min, Prefetch, QuerySet

from chats.history_bundle import Bundle, BundleError, record_extras
from chats.keys import InvalidKey, make_chat_key, validate_channel, validate_id
from chats.models import Actor, Chat, ChatKind, Message, MessageEdit
from chats.services import IngestError, message_ingest, message_record_edit, validate_text

FORMAT_VERSION = 1
REQUIRED_FIELDS = ("v", "channel", "chat_id", "user_id", "message_id", "ts", "role", "content")
MAX_REPORTED_ERRORS = 1000
NAMESPACE_MAX = 64
EXPORT_CHUNK_SIZE = 500


# --- export -----------------------------------------------------------------------------


def iso_utc(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def message_record(message: Message) -> dict:
    """The export record of one message (its chat, actor and edits should be preloaded)."""
    chat = message.chat
    actor = message.actor
    if hasattr(message, "reply_to_external_id"):
        reply_to = message.reply_to_external_id
    else:
        reply_to = message.reply_to.external_id if message.reply_to_id else None
    record = {
        "v": FORMAT_VERSION,
        "channel": chat.channel,
        "chat_id": chat.external_id,
        "thread_id": chat.thread_id or None,
        "chat_kind": chat.kind,
        "chat_title": chat.title,
        "user_id": actor.external_id if actor else None,
        "user_name": actor.display_name if actor else None,
        "message_id": message.external_id,
        "ts": iso_utc(message.source_ts or message.created_at),
        "source_ts": iso_utc(message.source_ts),
        "stored_at": iso_utc(message.created_at),
        "role": message.role,
        "content": message.text,
        "parts": message.parts,
        "metadata": message.metadata,
        "reply_to": reply_to,
        "token_count": message.token_count,
        "edited_at": iso_utc(message.edited_at),
        "edits": [
            {
                "previous_text": edit.previous_text,
                "previous_parts": edit.previous_parts,
                "new_text": edit.new_text,
                "new_parts": edit.new_parts,
                "source_ts": iso_utc(edit.source_ts),
                "recorded_at": iso_utc(edit.recorded_at),
            }
            for edit in message.edits.all()
        ],
    }
    if actor is not None and actor.namespace:
        record["user_namespace"] = actor.namespace
    return record


def export_messages(chats: QuerySet[Chat] | None = None) -> QuerySet[Message]:
    """Messages of `chats` (every chat when None) in history order, with what records need."""
    messages = (
        Message.objects.select_related("chat", "actor")
        .annotate(reply_to_external_id=F("reply_to__external_id"))
        .prefetch_related(Prefetch("edits", queryset=MessageEdit.objects.order_by("id")))
        .order_by("id")
    )
    if chats is not None:
        messages = messages.filter(chat__in=chats)
    return messages


def _write_batch(out: TextIO, batch: list[Message], bundle: Bundle | None) -> None:
    extras = [(extra.name, extra.export(batch, bundle)) for extra in record_extras()]
    for message in batch:
        record = message_record(message)
        for name, values in extras:
            if message.pk in values:
                record[name] = values[message.pk]
        out.write(json_line(record))


def history_export(
    *, out: TextIO, chats: QuerySet[Chat] | None = None, bundle: Bundle | None = None
) -> int:
    """Write one JSON line per message of `chats` (all when None) in history order, with
    the registered record extras; their bytes go to `bundle` when there is one.

    Non-ASCII text is written as is (`ensure_ascii=False`); `out` must encode UTF-8.
    Returns the number of records written."""
    count = 0
    batch: list[Message] = []
    for message in export_messages(chats).iterator(chunk_size=EXPORT_CHUNK_SIZE):
        batch.append(message)
        if len(batch) == EXPORT_CHUNK_SIZE:
            _write_batch(out, batch, bundle)
            count += len(batch)
            batch = []
    if batch:
        _write_batch(out, batch, bundle)
        count += len(batch)
    return count


def json_line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


# --- parsing and validation -------------------------------------------------------------


class RecordError(ValueError):
    """A line that is not a valid version-1 record; the message says which field and why."""


@dataclass(frozen=True)
class EditRecord:
    previous_text: str
    previous_parts: list
    new_text: str
    new_parts: list
    source_ts: datetime | None
    recorded_at: datetime


@dataclass(frozen=True)
class ImportRecord:
    chat_key: str
    channel: str
    chat_id: str
    thread_id: str | None
    chat_kind: str | None
    chat_title: str
    user_id: str | None
    user_name: str
    user_namespace: str
    message_id: str
    source_ts: datetime | None
    stored_at: datetime | None
    role: str
    content: str
    parts: list
    metadata: dict
    reply_to: str | None
    edited_at: datetime | None
    edits: tuple[EditRecord, ...]
    # Registered extras present on the line, each as its `parse` returned it.
    extras: dict[str, Any] = field(default_factory=dict)


def _extras(data: dict) -> dict[str, Any]:
    parsed = {}
    for extra in record_extras():
        if extra.name in data:
            try:
                parsed[extra.name] = extra.parse(data[extra.name])
            except ValueError as exc:
                raise RecordError(f"{extra.name}: {exc}") from exc
    return parsed


def _reject_constant(name: str):
    raise RecordError(f"{name} is not valid JSON (numbers must be finite)")


def _check_json_value(value: object, where: str) -> None:
    """Every string in stored JSON must be storable text; numbers must be finite."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _text(item, where)
        elif isinstance(item, float) and not math.isfinite(item):
            raise RecordError(f"{where} must not contain NaN or Infinity")
        elif isinstance(item, dict):
            for key, nested in item.items():
                _text(key, where)
                stack.append(nested)
        elif isinstance(item, list):
            stack.extend(item)


def _text(value: object, where: str) -> str:
    try:
        return validate_text(value, where)
    except IngestError as exc:
        raise RecordError(str(exc)) from exc


def _get(data: dict, key: str, kinds: tuple[type, ...], *, nullable: bool, default=None):
    if key not in data:
        return default
    value = data[key]
    if value is None:
        if nullable:
            return None
        raise RecordError(f"{key} must not be null")
    if isinstance(value, bool) or not isinstance(value, kinds):
        names = " or ".join(_TYPE_NAMES[kind] for kind in kinds)
        raise RecordError(f"{key} must be {names}{' or null' if nullable else ''}")
    return value


_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object"}


def _identifier(data: dict, key: str, *, nullable: bool) -> str | None:
    value = _get(data, key, (str, int), nullable=nullable)
    if value is None:
        return None
    try:
        return _text(validate_id(value, key), key)
    except InvalidKey as exc:
        raise RecordError(str(exc)) from exc


def _namespace(data: dict) -> str:
    value = _get(data, "user_namespace", (str,), nullable=True)
    if not value:
        return ""
    if len(value) > NAMESPACE_MAX or not value.isprintable() or value != value.strip():
        raise RecordError(f"user_namespace must be at most {NAMESPACE_MAX} printable characters")
    return value


def _timestamp(data: dict, key: str, *, nullable: bool) -> datetime | None:
    value = _get(data, key, (str,), nullable=nullable)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise RecordError(f"{key} is not an ISO 8601 timestamp: {value[:40]!r}") from exc
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise RecordError(f"{key} must carry a time zone (naive timestamp {value[:40]!r})")
    return parsed.astimezone(UTC)


def _json_field(data: dict, key: str, kind: type, default):
    value = _get(data, key, (kind,), nullable=True)
    if value is None:
        return default
    _check_json_value(value, key)
    return value


def _edit(data: object, index: int) -> EditRecord:
    if not isinstance(data, dict):
        raise RecordError(f"edits[{index}] must be an object")
    try:
        for key in ("previous_text", "new_text", "recorded_at"):
            if key not in data:
                raise RecordError(f"missing field {key!r}")
        return EditRecord(
            previous_text=_text(_get(data, "previous_text", (str,), nullable=False), "text"),
            previous_parts=_json_field(data, "previous_parts", list, []),
            new_text=_text(_get(data, "new_text", (str,), nullable=False), "text"),
            new_parts=_json_field(data, "new_parts", list, []),
            source_ts=_timestamp(data, "source_ts", nullable=True),
            recorded_at=_timestamp(data, "recorded_at", nullable=False),
        )
    except RecordError as exc:
        raise RecordError(f"edits[{index}]: {exc}") from exc


def _check_edit_chain(edits: tuple[EditRecord, ...], content: str, parts: list) -> None:
    """Replaying the edits from the first previous text must end at `content` and `parts`."""
    for index, edit in enumerate(edits):
        if (edit.previous_text, edit.previous_parts) == (edit.new_text, edit.new_parts):
            raise RecordError(f"edits[{index}] changes nothing")
        if index + 1 < len(edits):
            following = edits[index + 1]
            left = (edit.new_text, edit.new_parts)
            if left != (following.previous_text, following.previous_parts):
                raise RecordError(
                    f"edits[{index + 1}] does not start from the text edits[{index}] left"
                )
    if edits and (edits[-1].new_text, edits[-1].new_parts) != (content, parts):
        raise RecordError("the last edit does not lead to content and parts")


def parse_record(line: str) -> ImportRecord:
    """Parse and validate one JSON line; raises RecordError saying what is wrong."""
    try:
        data = json.loads(line, parse_constant=_reject_constant)
    except RecordError:
        raise
    except RecursionError as exc:
        raise RecordError("not JSON: nested too deeply") from exc
    except ValueError as exc:
        raise RecordError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RecordError("a record must be a JSON object")
    missing = [key for key in REQUIRED_FIELDS if key not in data]
    if missing:
        raise RecordError(f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    version = data["v"]
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise RecordError(f"unsupported format version v={version!r} (expected {FORMAT_VERSION})")

    channel = _get(data, "channel", (str,), nullable=False)
    try:
        validate_channel(channel)
    except InvalidKey as exc:
        raise RecordError(str(exc)) from exc
    role = _get(data, "role", (str,), nullable=False)
    if role not in Message.Role.values:
        raise RecordError(f"unknown role {role!r} (one of {', '.join(Message.Role.values)})")
    chat_kind = _get(data, "chat_kind", (str,), nullable=True)
    if chat_kind is not None and chat_kind not in ChatKind.values:
        raise RecordError(f"unknown chat_kind {chat_kind!r} (one of {', '.join(ChatKind.values)})")

    ts = _timestamp(data, "ts", nullable=False)
    source_ts = _timestamp(data, "source_ts", nullable=True) if "source_ts" in data else ts
    content = _text(_get(data, "content", (str,), nullable=False), "content")
    parts = _json_field(data, "parts", list, [])
    raw_edits = _get(data, "edits", (list,), nullable=True) or []
    edits = tuple(_edit(item, index) for index, item in enumerate(raw_edits))
    _check_edit_chain(edits, content, parts)

    chat_id = _identifier(data, "chat_id", nullable=False)
    thread_id = _identifier(data, "thread_id", nullable=True)
    try:
        chat_key = make_chat_key(channel, chat_id, thread_id)
    except InvalidKey as exc:
        raise RecordError(str(exc)) from exc
    return ImportRecord(
        chat_key=chat_key,
        channel=channel,
        chat_id=chat_id,
        thread_id=thread_id,
        chat_kind=chat_kind,
        chat_title=_text(_get(data, "chat_title", (str,), nullable=True) or "", "chat_title"),
        user_id=_identifier(data, "user_id", nullable=True),
        user_name=_text(_get(data, "user_name", (str,), nullable=True) or "", "user_name"),
        user_namespace=_namespace(data),
        message_id=_identifier(data, "message_id", nullable=False),
        source_ts=source_ts,
        stored_at=_timestamp(data, "stored_at", nullable=True),
        role=role,
        content=content,
        parts=parts,
        metadata=_json_field(data, "metadata", dict, {}),
        reply_to=_identifier(data, "reply_to", nullable=True),
        edited_at=_timestamp(data, "edited_at", nullable=True),
        edits=edits,
        extras=_extras(data),
    )


# --- import -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LineError:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class ImportReport:
    created: int = 0
    duplicates: int = 0
    error_count: int = 0
    errors: list[LineError] = field(default_factory=list)
    aborted: bool = False

    def add_error(self, line: int, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(LineError(line, message))

    def count(self, *, created: bool) -> None:
        if created:
            self.created += 1
        else:
            self.duplicates += 1

    def summary(self) -> str:
        if self.aborted:
            return (
                f"import aborted, nothing stored: {self.error_count} bad "
                f"line{'s' if self.error_count != 1 else ''}"
            )
        return (
            f"{self.created} new, {self.duplicates} duplicates, "
            f"{self.error_count} bad lines skipped"
        )


class _Abort(Exception):
    """Rolls the strict import back."""


@dataclass
class _ChatState:
    activity_before: datetime | None  # None: the chat did not exist before this import
    created_messages: int = 0


class _Importer:
    """Stores parsed records; remembers which chats and actors existed before the import."""

    def __init__(self, bundle: Bundle | None = None):
        self.bundle = bundle
        self.chats: dict[str, _ChatState] = {}
        self.actors_before: dict[tuple[str, str, str], bool] = {}

    def _chat_state(self, chat_key: str) -> _ChatState:
        if chat_key not in self.chats:
            before = (
                Chat.objects.filter(chat_key=chat_key)
                .values_list("last_activity_at", flat=True)
                .first()
            )
            self.chats[chat_key] = _ChatState(activity_before=before)
        return self.chats[chat_key]

    def _actor_existed(self, channel: str, namespace: str, user_id: str) -> bool:
        key = (channel, namespace, user_id)
        if key not in self.actors_before:
            self.actors_before[key] = Actor.objects.filter(
                channel=channel, namespace=namespace, external_id=user_id
            ).exists()
        return self.actors_before[key]

    def store(self, record: ImportRecord) -> bool:
        """Store one record; False when its message is already there (nothing changes)."""
        chat_key = record.chat_key
        state = self._chat_state(chat_key)
        if Message.objects.filter(chat__chat_key=chat_key, external_id=record.message_id).exists():
            return False
        chat_is_new = state.activity_before is None
        # An old export must not rename a live chat or actor; new ones get the file's names.
        user_name = ""
        if record.user_id is not None and not self._actor_existed(
            record.channel, record.user_namespace, record.user_id
        ):
            user_name = record.user_name
        first = record.edits[0] if record.edits else None
        result = message_ingest(
            channel=record.channel,
            chat_id=record.chat_id,
            thread_id=record.thread_id,
            chat_kind=record.chat_kind,
            chat_title=record.chat_title if chat_is_new else "",
            user_id=record.user_id,
            actor_namespace=record.user_namespace,
            user_name=user_name,
            message_id=record.message_id,
            role=record.role,
            text=first.previous_text if first else record.content,
            parts=first.previous_parts if first else record.parts,
            source_ts=record.source_ts,
            reply_to_message_id=record.reply_to,
            metadata=record.metadata,
        )
        if result.duplicate:
            return False
        message = result.message
        for edit in record.edits:
            stored_edit = message_record_edit(
                message=message, text=edit.new_text, parts=edit.new_parts, source_ts=edit.source_ts
            )
            MessageEdit.objects.filter(pk=stored_edit.pk).update(recorded_at=edit.recorded_at)
        extras = {extra.name: extra for extra in record_extras()}
        for name, value in record.extras.items():
            extras[name].restore(message, value, self.bundle)
        restored = {}
        if record.stored_at is not None:
            restored["created_at"] = record.stored_at
        edited_at = record.edited_at or (record.edits[-1].recorded_at if record.edits else None)
        if edited_at is not None:
            restored["edited_at"] = edited_at
        if restored:
            Message.objects.filter(pk=message.pk).update(**restored)
        state.created_messages += 1
        return True

    def finish(self) -> None:
        """Chat activity follows the imported timestamps, not the time of the import."""
        for chat_key, state in self.chats.items():
            if not state.created_messages:
                continue
            chat = Chat.objects.select_for_update().filter(chat_key=chat_key).first()
            if chat is None:
                continue
            bounds = Message.objects.filter(chat=chat).aggregate(
                first=Min("created_at"), last=Max("created_at")
            )
            changes = {"last_activity_at": bounds["last"]}
            if state.activity_before is None:
                changes["created_at"] = bounds["first"]
            else:
                changes["last_activity_at"] = max(state.activity_before, bounds["last"])
            Chat.objects.filter(pk=chat.pk).update(**changes)


def _lines(stream: Iterable[str | bytes]) -> Iterator[tuple[int, str | None, str | None]]:
    """(line number, text, error) for each non-blank line; bytes are decoded as UTF-8."""
    for number, raw in enumerate(stream, start=1):
        if isinstance(raw, bytes):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield number, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})"
                continue
        else:
            text = raw
        if number == 1:
            text = text.removeprefix("\ufeff")
        if text.strip():
            yield number, text, None


# Storage can still refuse a record that passed validation (e.g. a value too long for a
# column on PostgreSQL); the line is reported like any other bad line.
_STORE_ERRORS = (IngestError, InvalidKey, DataError, IntegrityError, BundleError)


def history_import(
    *, lines: Iterable[str | bytes], strict: bool = False, bundle: Bundle | None = None
) -> ImportReport:
    """Import JSON lines of history; idempotent by (chat, message_id).

    A bad line is reported with its number and skipped, each good line being stored in its
    own transaction. With `strict`, any bad line aborts the whole import in one transaction
    and nothing is stored (the remaining lines are still checked so every error is reported).
    Record extras find their bytes in `bundle` (a folder or an archive), when given.
    """
    report = ImportReport()
    importer = _Importer(bundle)
    if not strict:
        for number, text, error in _lines(lines):
            try:
                if error is not None:
                    raise RecordError(error)
                record = parse_record(text)
                with transaction.atomic():
                    created = importer.store(record)
            except (RecordError, *_STORE_ERRORS) as exc:
                report.add_error(number, str(exc))
                continue
            report.count(created=created)
        with transaction.atomic():
            importer.finish()
        return report

    try:
        with transaction.atomic():
            for number, text, error in _lines(lines):
                try:
                    if error is not None:
                        raise RecordError(error)
                    record = parse_record(text)
                    if report.error_count:
                        continue  # already aborting: only check the rest
                    with transaction.atomic():
                        created = importer.store(record)
                except (RecordError, *_STORE_ERRORS) as exc:
                    report.add_error(number, str(exc))
                    continue
                report.count(created=created)
            if report.error_count:
                raise _Abort
            importer.finish()
    except _Abort:
        report.created = report.duplicates = 0
        report.aborted = True
    return report
