"""A message's files in history exports and imports (the `attachments` record extra of
chats/history_bundle.py): each file's facts on the record, its bytes in the bundle by
SHA-256, once however many messages carry them. On import the bytes are checked against
their hash and stored as one blob again; what the hub derived (text, pages, description)
and the state come back as they were, so an export of the import is the same, byte for byte.
A file whose bytes the import does not carry is kept as `failed`, saying so; a file the hub
never received (no hash, `failed` with why) comes back as it was."""

from collections.abc import Sequence
from datetime import datetime

from django.conf import settings

from attachments.models import Attachment
from attachments.services import blob_for, mark_carrying
from chats.history_bundle import Bundle
from chats.jsonl import iso_utc
from chats.models import Message

MAX_FILES_PER_RECORD = 100
MISSING_BYTES = "The file's bytes were not in the imported history."
_FIELDS = {
    # name: (types, nullable, max length)
    "name": (str, False, 255),
    "kind": (str, False, 16),
    "media_type": (str, False, 127),
    "declared_type": (str, False, 127),
    "size": (int, False, None),
    "sha256": (str, False, 64),
    "state": (str, False, 16),
    "failure": (str, False, 500),
    "extracted_text": (str, False, None),
    "page_count": (int, True, None),
    "description": (str, False, None),
    "created_at": (str, False, 40),
}


def attachments_export(messages: Sequence[Message], bundle: Bundle | None) -> dict[int, list]:
    """`{message pk: [file, …]}` for the messages with files; their bytes into `bundle`."""
    rows = (
        Attachment.objects.filter(message__in=[m.pk for m in messages])
        .select_related("blob")
        .order_by("id")
    )
    result: dict[int, list] = {}
    for row in rows:
        result.setdefault(row.message_id, []).append(
            {
                "name": row.name,
                "kind": row.kind,
                "media_type": row.media_type,
                "declared_type": row.declared_type,
                "size": row.size,
                "sha256": row.sha256,
                "state": row.state,
                "failure": row.failure,
                "extracted_text": row.extracted_text,
                "page_count": row.page_count,
                "description": row.description,
                "created_at": iso_utc(row.created_at),
            }
        )
        if bundle is not None and row.blob is not None:
            with row.blob.file.open("rb") as stream:
                bundle.blob_put(row.sha256, row.blob.size, stream)
    return result


def _entry(value: object, index: int) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"[{index}] must be an object")
    entry = {}
    for name, (kind, nullable, longest) in _FIELDS.items():
        if name not in value:
            raise ValueError(f"[{index}] misses {name}")
        item = value[name]
        if item is None and nullable:
            entry[name] = None
            continue
        if not isinstance(item, kind) or isinstance(item, bool):
            raise ValueError(f"[{index}].{name} must be {kind.__name__}")
        if longest is not None and len(item) > longest:
            raise ValueError(f"[{index}].{name} is longer than {longest} characters")
        entry[name] = item
    if entry["kind"] not in Attachment.Kind.values:
        raise ValueError(f"[{index}].kind {entry['kind']!r} is not a kind of file")
    if entry["state"] not in Attachment.State.values:
        raise ValueError(f"[{index}].state {entry['state']!r} is not a state")
    if entry["size"] < 0 or entry["size"] > settings.ATTACHMENTS_MAX_FILE_BYTES * 64:
        raise ValueError(f"[{index}].size is out of range")
    never_received = entry["sha256"] == "" and entry["state"] == Attachment.State.FAILED
    if not never_received and (
        len(entry["sha256"]) != 64 or entry["sha256"].strip("0123456789abcdef")
    ):
        raise ValueError(f"[{index}].sha256 is not a SHA-256")
    try:
        entry["created_at"] = datetime.fromisoformat(entry["created_at"].replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"[{index}].created_at is not an ISO 8601 time") from exc
    if entry["created_at"].tzinfo is None:
        raise ValueError(f"[{index}].created_at has no offset")
    return entry


def attachments_parse(value: object) -> list[dict]:
    """The record's files, checked (ValueError says which and why)."""
    if not isinstance(value, list):
        raise ValueError("must be a list")
    if len(value) > MAX_FILES_PER_RECORD:
        raise ValueError(f"more than {MAX_FILES_PER_RECORD} files on one message")
    return [_entry(item, index) for index, item in enumerate(value)]


def attachments_restore(message: Message, entries: list[dict], bundle: Bundle | None) -> None:
    """Store the imported message's files (inside the record's transaction)."""
    if entries:  # the context builder asks for the files of messages that carry any
        mark_carrying(message)
    for entry in entries:
        data = None
        if not entry["sha256"]:  # a file the hub never received: its record, as it was
            Attachment.objects.create(message=message, **entry)
            continue
        if bundle is not None and entry["size"]:
            data = bundle.blob_read_verified(entry["sha256"], limit=entry["size"])
        fields = dict(entry)
        if data is not None:
            fields["blob"] = blob_for(data, entry["sha256"])
        elif entry["size"]:
            fields["state"] = Attachment.State.FAILED
            fields["failure"] = MISSING_BYTES
        Attachment.objects.create(message=message, **fields)
