"""Files that arrive inside other requests, stored as every upload is (`attachment_store`):

- `files` in the JSON body of `POST /api/v1/messages`: `[{"name", "data_base64", "type"}]`,
  each at most ATTACHMENTS_JSON_MAX_BYTES decoded (and the API's JSON body limit applies);
  registered with chats.api.post_fields;
- `/v1` content parts: Chat Completions' `image_url` and `file`, the Responses API's
  `input_image` and `input_file`, as `data:` URLs (or a `file`'s bare base64) always, as
  https URLs only when OPENAI_API_FETCH_IMAGE_URLS is on (attachments.fetching); registered
  with openai_api.content_parts.

Everything is decoded and checked before the message is stored: bad base64 or a refused URL
is a 400 and nothing is stored. A file refused by a limit when it is stored (too many on the
message, the chat's day) keeps the message in the API (the answer says which file and why)
and refuses the whole request in `/v1` (a client there cannot be told "partly").
"""

import base64
import binascii
import mimetypes
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.message_files import message_files_store
from attachments.render import attachment_json
from attachments.waiting import turn_request_when_ready
from chats.api.errors import ApiError, bad_request
from chats.api.post_fields import PostFieldOutcome
from chats.models import Message

FILE_KEYS = ("name", "data_base64", "type")
_WHITESPACE = b"\t\n\r "


@dataclass(frozen=True)
class InboundFile:
    """A file taken out of a request, decoded and within its size bound; not stored yet."""

    name: str
    data: bytes
    declared_type: str = ""


class InboundRefused(ValueError):
    """A file that cannot be taken: `str(exc)` says why; `status` 400 (malformed) or 413."""

    def __init__(self, message: str, *, status: int = 400):
        super().__init__(message)
        self.status = status


def _size_words(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB" if size >= 1024 * 1024 else f"{size} bytes"


def decode_base64(text: str, *, limit: int, what: str) -> bytes:
    """Standard base64 (line breaks and spaces allowed, `=` padding required), at most
    `limit` bytes decoded; InboundRefused otherwise. The size is checked on the encoded
    length before anything is decoded."""
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError as exc:
        raise InboundRefused(f"{what} is not valid base64: it has non-ASCII characters.") from exc
    raw = raw.translate(None, _WHITESPACE)
    if len(raw) // 4 * 3 - 2 > limit:
        raise InboundRefused(
            f"{what} is larger than {_size_words(limit)} decoded; this way takes smaller files.",
            status=413,
        )
    if len(raw) - len(raw.rstrip(b"=")) > 2:
        raise InboundRefused(f"{what} is not valid base64: more than two = of padding.")
    if len(raw) % 4:
        raise InboundRefused(
            f"{what} is not valid base64: its length ({len(raw)} characters without line "
            "breaks) is not a multiple of 4; is its = padding missing?"
        )
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InboundRefused(
            f"{what} is not valid base64 ({exc}): only A-Z, a-z, 0-9, + and /, with = padding "
            "at the end."
        ) from exc
    if len(data) > limit:
        raise InboundRefused(
            f"{what} is larger than {_size_words(limit)} decoded; this way takes smaller files.",
            status=413,
        )
    return data


def parse_data_url(url: str, *, limit: int, what: str) -> tuple[str, bytes]:
    """`data:[<type>][;base64],<data>` as (declared type, bytes), or InboundRefused."""
    header, comma, payload = url.partition(",")
    if not comma or not header.lower().startswith("data:"):
        raise InboundRefused(f"{what} is not a data: URL (data:<type>;base64,<data>).")
    params = header[5:].split(";")
    declared = params[0].strip().lower()
    if "base64" in (p.strip().lower() for p in params[1:]):
        return declared, decode_base64(payload, limit=limit, what=what)
    data = unquote_to_bytes(payload)
    if len(data) > limit:
        raise InboundRefused(f"{what} is larger than {_size_words(limit)}.", status=413)
    return declared, data


def default_name(stem: str, declared_type: str) -> str:
    extension = mimetypes.guess_extension(declared_type or "") or ""
    return f"{stem}{extension}"


def files_store(message: Message, files: list[InboundFile]) -> tuple[list, list[dict]]:
    """Store each file on `message` through the service every upload door shares
    (attachments.message_files); the stored attachments and, for each refused file, its
    name, reason and status."""
    uploads = [SimpleUploadedFile(f.name, f.data, content_type=f.declared_type) for f in files]
    outcome = message_files_store(message=message, files=uploads)
    refused = [{"name": r.name, "reason": r.reason, "status": r.status} for r in outcome.refused]
    return outcome.stored, refused


# --- `files` in the JSON message post (chats.api.post_fields) --------------------------------


def _json_file(item: object, index: int) -> InboundFile:
    where = f"files[{index}]"
    if not isinstance(item, dict):
        raise bad_request("invalid_field", f"{where} must be an object.", field=where)
    unknown = sorted(set(item) - set(FILE_KEYS))
    if unknown:
        raise bad_request(
            "unknown_field",
            f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(FILE_KEYS)}.",
            field=f"{where}.{unknown[0]}",
        )
    for key in ("name", "type"):
        if item.get(key) is not None and not isinstance(item[key], str):
            raise bad_request(
                "invalid_field", f"{where}.{key} must be a string.", field=f"{where}.{key}"
            )
    data = item.get("data_base64")
    if not isinstance(data, str):
        raise bad_request(
            "invalid_field",
            f"{where}.data_base64 is required: the file's bytes in base64.",
            field=f"{where}.data_base64",
        )
    try:
        decoded = decode_base64(
            data, limit=settings.ATTACHMENTS_JSON_MAX_BYTES, what=f"{where}.data_base64"
        )
    except InboundRefused as exc:
        if exc.status == 413:
            raise ApiError(
                413,
                "payload_too_large",
                f"{exc} Send larger files as multipart to /api/v1/uploads/messages.",
                field=f"{where}.data_base64",
            ) from exc
        raise bad_request("invalid_base64", str(exc), field=f"{where}.data_base64") from exc
    declared = item.get("type") or ""
    return InboundFile(
        name=item.get("name") or default_name(f"file-{index + 1}", declared),
        data=decoded,
        declared_type=declared,
    )


def json_files_parse(value: object) -> list[InboundFile]:
    """`files` of a JSON message post, every file decoded, or ApiError (nothing stored)."""
    if not isinstance(value, list):
        raise bad_request("invalid_field", "files must be a list of objects.", field="files")
    if len(value) > settings.ATTACHMENTS_MAX_PER_MESSAGE:
        raise bad_request(
            "too_many_files",
            f"A message may carry at most {settings.ATTACHMENTS_MAX_PER_MESSAGE} files.",
            field="files",
        )
    return [_json_file(item, index) for index, item in enumerate(value)]


def _turn_when_files_ready(message: Message) -> tuple:
    """The turn now, or held until the message's files settle (as the multipart upload)."""
    turn = turn_request_when_ready(message=message)
    return turn, {"turn_waits_for_files": turn is None}


def json_files_store(message: Message, files: list[InboundFile]) -> PostFieldOutcome:
    """Store the post's files on its new message; a refused one is named in the answer. The
    turn waits for files still `pending` (attachments.waiting)."""
    stored, refused = files_store(message, files)
    body = {"attachments": [attachment_json(a) for a in stored]}
    hold = _turn_when_files_ready
    if not refused:
        return PostFieldOutcome(body=body, turn_request=hold)
    status = max(item.pop("status") for item in refused)
    error = {
        "code": "attachment_refused",
        "message": "; ".join(f"{item['name']}: {item['reason']}" for item in refused)
        + " The message was stored without these files.",
    }
    return PostFieldOutcome(
        body=body | {"refused": refused}, status=status, error=error, turn_request=hold
    )
