"""Transcripts in history exports and imports (the `transcripts` record extra of
chats/history_bundle.py, beside `attachments`): the words travel as the attachment's
`extracted_text` already; this carries what the `Transcript` row adds (language, duration,
engine, parts), keyed by the file's place among the message's files and its SHA-256, so an
import restores them on the files `attachments` restored just before."""

from collections.abc import Sequence

from attachments.models import Attachment
from chats.models import Message
from voice.models import Transcript

MAX_PER_RECORD = 100


def transcripts_export(messages: Sequence[Message], bundle) -> dict[int, list]:
    rows = Attachment.objects.filter(message__in=[m.pk for m in messages]).order_by("id")
    files = list(rows.values_list("pk", "message_id", "sha256"))
    found = {t.attachment_id: t for t in Transcript.objects.filter(attachment__in=rows)}
    result: dict[int, list] = {}
    places: dict[int, int] = {}
    for pk, message_id, sha256 in files:
        place = places.get(message_id, 0)
        places[message_id] = place + 1
        transcript = found.get(pk)
        if transcript is None:
            continue
        result.setdefault(message_id, []).append(
            {
                "file": place,
                "sha256": sha256,
                "language": transcript.language,
                "duration_seconds": transcript.duration_seconds,
                "engine": transcript.engine,
                "parts_done": transcript.parts_done,
                "parts_total": transcript.parts_total,
            }
        )
    return result


def _entry(value: object, index: int) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"[{index}] must be an object")
    checks = {
        "file": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1000,
        "sha256": lambda v: isinstance(v, str) and len(v) == 64,
        "language": lambda v: isinstance(v, str) and len(v) <= 16,
        "duration_seconds": lambda v: (
            v is None or (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 10**7)
        ),
        "engine": lambda v: isinstance(v, str) and len(v) <= 64,
        "parts_done": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**6,
        "parts_total": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**6,
    }
    for name, check in checks.items():
        if name not in value or not check(value[name]):
            raise ValueError(f"[{index}].{name} is missing or not valid")
    return {name: value[name] for name in checks}


def transcripts_parse(value: object) -> list[dict]:
    if not isinstance(value, list):
        raise ValueError("must be a list")
    if len(value) > MAX_PER_RECORD:
        raise ValueError(f"more than {MAX_PER_RECORD} transcripts on one message")
    return [_entry(item, index) for index, item in enumerate(value)]


def transcripts_restore(message: Message, entries: list[dict], bundle) -> None:
    """Inside the record's transaction, after `attachments` restored the message's files."""
    files = list(message.attachments.order_by("id").values_list("pk", "sha256"))
    for entry in entries:
        if entry["file"] >= len(files) or files[entry["file"]][1] != entry["sha256"]:
            continue  # not the file it was exported with: nothing to attach it to
        Transcript.objects.update_or_create(
            attachment_id=files[entry["file"]][0],
            defaults={
                name: entry[name]
                for name in (
                    "language",
                    "duration_seconds",
                    "engine",
                    "parts_done",
                    "parts_total",
                )
            },
        )
