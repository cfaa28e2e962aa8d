"""`/v1` images, files and audio, as attachments of the stored user message (registered with
openai_api.content_parts in AttachmentsConfig.ready()).

The part shapes OpenAI's clients send:

- Chat Completions `{"type": "image_url", "image_url": {"url": …}}` (a bare string too);
- Chat Completions `{"type": "file", "file": {"file_data": …, "filename": …}}`;
- Responses `{"type": "input_image", "image_url": …}`;
- Responses `{"type": "input_file", "file_data": …, "filename": …}` or `"file_url": …`;
- `{"type": "input_audio", "input_audio": {"data": <base64>, "format": "wav" | "mp3"}}`
  (Chat Completions; the same fields at the part's top level are taken too): a voice
  message, stored as an audio attachment whose transcript a processor makes. The bytes must
  sniff as audio; `format` only names the file.

A file that is read after it is stored (a PDF, a DOCX: `pending`) holds the message's turn
(attachments.waiting) until it is read or ATTACHMENTS_TURN_WAIT_SECONDS pass; the endpoint
follows the turn the hold's release requests.

`data:` URLs (and a file's bare base64) are always taken; an https URL only when
OPENAI_API_FETCH_IMAGE_URLS is on (attachments.fetching refuses private addresses and bounds
size and time); a `file_id` is refused (the hub keeps no OpenAI Files).
"""

from django.conf import settings

from attachments.fetching import FetchRefused, fetch_url
from attachments.inbound import (
    InboundFile,
    InboundRefused,
    decode_base64,
    default_name,
    files_store,
    parse_data_url,
)
from attachments.sniffing import kind_for, sniff_media_type
from attachments.waiting import files_hold_if_pending
from chats.models import Message
from openai_api.content_parts import ContentPart, ContentPartHandler, ContentPartRefused

PART_TYPES = ("image_url", "input_image", "file", "input_file", "input_audio")
# input_audio's `format`: OpenAI's wav and mp3, and the containers the hub also decodes.
AUDIO_FORMATS = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "ogg": "audio/ogg",
    "opus": "audio/ogg",
    "webm": "audio/webm",
    "m4a": "audio/mp4",
    "flac": "audio/flac",
}
FETCH_OFF = (
    "{}: the hub does not fetch URLs (OPENAI_API_FETCH_IMAGE_URLS is off); send the file "
    "as a data: URL (data:<type>;base64,<data>)."
)
NO_FILE_IDS = (
    "{}: file ids are not supported (this hub keeps no OpenAI Files); send the file's bytes "
    "as a data: URL."
)


def _refused(part: ContentPart, exc: Exception) -> ContentPartRefused:
    status = getattr(exc, "status", 400)
    return ContentPartRefused(
        f"{part.param}: {exc}",
        param=part.param,
        status=status,
        code="payload_too_large" if status == 413 else "invalid_content_part",
    )


def _fields(part: ContentPart) -> tuple[str | None, str | None, str | None, str]:
    """(url, bare base64, file id, given name) of a part, whichever it carries."""
    body = part.body
    if part.type in ("image_url", "input_image"):
        image = body.get("image_url")
        if isinstance(image, dict):
            image = image.get("url")
        return image, None, body.get("file_id"), ""
    inner = body.get("file") if part.type == "file" else body
    if not isinstance(inner, dict):
        raise ContentPartRefused(f"{part.param}.file must be an object.", param=part.param)
    data = inner.get("file_data")
    name = inner.get("filename") if isinstance(inner.get("filename"), str) else ""
    url = inner.get("file_url")
    if isinstance(data, str) and data.startswith("data:"):
        return data, None, None, name
    return url, data, inner.get("file_id"), name


def _fetched(part: ContentPart, url: str, name: str) -> InboundFile:
    if not settings.OPENAI_API_FETCH_IMAGE_URLS:
        raise ContentPartRefused(FETCH_OFF.format(part.param), param=part.param, code="url_refused")
    try:
        fetched = fetch_url(
            url,
            max_bytes=settings.ATTACHMENTS_MAX_FILE_BYTES,
            timeout=settings.OPENAI_API_FETCH_TIMEOUT_SECONDS,
        )
    except FetchRefused as exc:
        raise ContentPartRefused(
            f"{part.param}: {exc}", param=part.param, code="url_refused"
        ) from exc
    declared = fetched.content_type.split(";", 1)[0].strip()
    return InboundFile(
        name=name or fetched.name or default_name("image", declared),
        data=fetched.data,
        declared_type=declared,
    )


def _audio_resolve(part: ContentPart) -> InboundFile:
    """An input_audio part's bytes: base64 `data` that sniffs as audio, named by `format`."""
    body = part.body.get("input_audio", part.body)
    if not isinstance(body, dict):
        raise ContentPartRefused(f"{part.param}.input_audio must be an object.", param=part.param)
    data, given = body.get("data"), body.get("format")
    if not isinstance(given, str) or given.lower() not in AUDIO_FORMATS:
        raise ContentPartRefused(
            f"{part.param}: input_audio.format must be one of {', '.join(AUDIO_FORMATS)}.",
            param=part.param,
        )
    if not isinstance(data, str) or not data:
        raise ContentPartRefused(
            f"{part.param}: input_audio.data must be the audio's bytes in base64.",
            param=part.param,
        )
    limit = settings.ATTACHMENTS_MAX_FILE_BYTES
    try:
        raw = decode_base64(data, limit=limit, what="input_audio.data")
    except InboundRefused as exc:
        raise _refused(part, exc) from exc
    sniffed = sniff_media_type(raw)
    if kind_for(sniffed) not in ("audio", "video"):
        raise ContentPartRefused(
            f"{part.param}: input_audio.data is not audio (its bytes are {sniffed}).",
            param=part.param,
        )
    given = given.lower()
    return InboundFile(f"audio.{given}", raw, AUDIO_FORMATS[given])


def part_resolve(part: ContentPart) -> InboundFile:
    """The part's bytes (decoded or fetched) and name; ContentPartRefused otherwise."""
    if part.type == "input_audio":
        return _audio_resolve(part)
    url, bare, file_id, name = _fields(part)
    limit = settings.ATTACHMENTS_MAX_FILE_BYTES
    stem = "image" if part.type in ("image_url", "input_image") else "file"
    try:
        if isinstance(url, str) and url.strip().lower().startswith("data:"):
            declared, data = parse_data_url(url.strip(), limit=limit, what="the data: URL")
            return InboundFile(name or default_name(stem, declared), data, declared)
        if isinstance(bare, str) and bare:
            return InboundFile(name or stem, decode_base64(bare, limit=limit, what="file_data"))
    except InboundRefused as exc:
        raise _refused(part, exc) from exc
    if isinstance(url, str) and url.strip():
        return _fetched(part, url.strip(), name)
    if file_id:
        raise ContentPartRefused(NO_FILE_IDS.format(part.param), param=part.param)
    raise ContentPartRefused(f"{part.param} carries no file: send a data: URL.", param=part.param)


def parts_store(message: Message, files: list[InboundFile]) -> None:
    """Store the files on the new user message; one refused by a limit refuses the request
    (raised inside its transaction: nothing of it is kept)."""
    if len(files) > settings.ATTACHMENTS_MAX_PER_MESSAGE:
        raise ContentPartRefused(
            f"A message may carry at most {settings.ATTACHMENTS_MAX_PER_MESSAGE} files.",
            code="too_many_files",
        )
    _, refused = files_store(message, files)
    if refused:
        first = refused[0]
        raise ContentPartRefused(
            f"{first['name']}: {first['reason']}",
            status=first["status"],
            code="attachment_refused",
        )
    # A file still to be read (a PDF's text) holds the turn until it is read, or the bound;
    # the endpoint sees the hold (chats.agent.holds) and follows the turn its release requests.
    files_hold_if_pending(message=message, respond=True)


content_part_handler = ContentPartHandler(
    name="attachments", types=PART_TYPES, resolve=part_resolve, store=parts_store
)
