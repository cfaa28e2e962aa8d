"""Reading and validating API input: the JSON body of a message post and query parameters.

Everything is checked before any write, so a bad request stores nothing. Field problems
raise `chats.services.IngestError` (the same error the ingestion service raises), the rest
`ApiError`; `api_endpoint` renders both.
"""

import json
import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

from chats.api.errors import ApiError, bad_request
from chats.api.post_fields import post_field_names
from chats.keys import InvalidKey, validate_channel, validate_id
from chats.models import Channel, ChatKind
from chats.services import IngestError, validate_text

MESSAGE_FIELDS = (
    "channel",
    "chat_id",
    "user_id",
    "user_name",
    "message_id",
    "text",
    "thread_id",
    "chat_title",
    "chat_kind",
    "ts",
    "respond",
)
REQUIRED_MESSAGE_FIELDS = ("chat_id", "user_id", "message_id", "text")
DEFAULT_CHANNEL = Channel.API
_DIGITS = re.compile(r"^[0-9]{1,18}$")


@dataclass(frozen=True)
class MessagePost:
    """A validated `POST /messages` body."""

    channel: str
    chat_id: str
    user_id: str
    user_name: str
    message_id: str
    text: str
    thread_id: str | None
    chat_title: str
    chat_kind: str | None
    source_ts: datetime | None
    respond: bool


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "payload_too_large", f"The request body must be at most {limit} bytes.")


def read_body(request: HttpRequest) -> bytes:
    """The raw body, refused with 413 beyond API_MAX_BODY_BYTES (declared or actual size)."""
    limit = settings.API_MAX_BODY_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0  # Django reads a malformed length as 0 too; the real size is checked below
    if declared > limit:
        raise _too_large(limit)
    try:
        body = request.body
    except RequestDataTooBig as exc:
        # Content-Length was absent or understated (chunked upload) and the body ran past
        # DATA_UPLOAD_MAX_MEMORY_SIZE while Django buffered it.
        raise _too_large(limit) from exc
    if len(body) > limit:
        raise _too_large(limit)
    return body


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def read_json_object(request: HttpRequest) -> dict:
    """The body parsed as a JSON object (UTF-8, no NaN/Infinity), or ApiError 400/413."""
    body = read_body(request)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(
            "invalid_encoding", f"The body is not valid UTF-8 (byte {exc.start})."
        ) from exc
    if not text.strip():
        raise bad_request("malformed_json", "The body is empty; send a JSON object.")
    try:
        payload = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise bad_request("malformed_json", f"The body is not valid JSON: {exc}.") from exc
    if not isinstance(payload, dict):
        raise bad_request(
            "invalid_body", f"The body must be a JSON object, not {_json_type(payload)}."
        )
    return payload


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    if value is None:
        return "null"
    return "an object"


def _unicode_ok(value: str, field: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise IngestError(field, f"{field} is not valid Unicode (lone surrogate)") from exc
    return value


def _id(payload: dict, field: str) -> str:
    try:
        value = validate_id(payload[field], field)
    except InvalidKey as exc:
        raise IngestError(field, str(exc)) from exc
    return _unicode_ok(value, field)


def _optional_string(payload: dict, field: str) -> str:
    value = payload.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise IngestError(field, f"{field} must be a string, not {_json_type(value)}")
    return validate_text(value, field)


def _channel(payload: dict) -> str:
    channel = payload.get("channel")
    if channel is None:
        return DEFAULT_CHANNEL
    if not isinstance(channel, str):
        raise IngestError("channel", f"channel must be a string, not {_json_type(channel)}")
    try:
        validate_channel(channel)
    except InvalidKey as exc:
        raise IngestError("channel", str(exc)) from exc
    if channel not in Channel.values:
        raise IngestError("channel", f"channel must be one of {', '.join(Channel.values)}")
    return channel


def _timestamp(payload: dict) -> datetime | None:
    value = payload.get("ts")
    if value is None:
        return None
    if not isinstance(value, str):
        raise IngestError("ts", f"ts must be an ISO 8601 string, not {_json_type(value)}")
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise IngestError("ts", f"ts is not an ISO 8601 timestamp: {value[:40]!r}") from exc


def parse_message_post(payload: dict) -> MessagePost:
    """Validate every field of a message post; unknown fields are refused to catch typos."""
    unknown = sorted(set(payload) - set(MESSAGE_FIELDS))
    if unknown:
        raise bad_request(
            "unknown_field",
            f"Unknown field {unknown[0]!r}; allowed fields: "
            f"{', '.join((*MESSAGE_FIELDS, *post_field_names()))}.",
            field=unknown[0],
        )
    for field in REQUIRED_MESSAGE_FIELDS:
        if payload.get(field) is None:
            raise bad_request("missing_field", f"The field {field!r} is required.", field=field)

    text = payload["text"]
    if not isinstance(text, str):
        raise IngestError("text", f"text must be a string, not {_json_type(text)}")
    validate_text(text)
    if not text.strip():
        raise IngestError("text", "text must not be empty")

    thread_id = payload.get("thread_id")
    if thread_id == "":
        thread_id = None
    chat_kind = payload.get("chat_kind")
    if chat_kind is not None and chat_kind not in ChatKind.values:
        raise IngestError("chat_kind", f"chat_kind must be one of {', '.join(ChatKind.values)}")
    respond = payload.get("respond", True)
    if respond is None:
        respond = True
    if not isinstance(respond, bool):
        raise IngestError("respond", f"respond must be true or false, not {_json_type(respond)}")

    return MessagePost(
        channel=_channel(payload),
        chat_id=_id(payload, "chat_id"),
        user_id=_id(payload, "user_id"),
        user_name=_optional_string(payload, "user_name"),
        message_id=_id(payload, "message_id"),
        text=text,
        thread_id=None if thread_id is None else _id(payload, "thread_id"),
        chat_title=_optional_string(payload, "chat_title"),
        chat_kind=chat_kind,
        source_ts=_timestamp(payload),
        respond=respond,
    )


def int_param(
    request: HttpRequest, name: str, *, default: int | None, minimum: int, maximum: int | None
) -> int | None:
    """A non-negative integer query parameter within bounds, or ApiError 400."""
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    if not _DIGITS.match(raw):
        raise bad_request(
            "invalid_parameter", f"{name} must be a whole number, got {raw[:40]!r}.", field=name
        )
    value = int(raw)
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise bad_request("invalid_parameter", f"{name} must be {bounds}, got {value}.", field=name)
    return value
