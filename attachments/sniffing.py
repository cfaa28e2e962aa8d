"""What a file is, read from its bytes alone: the name and the client's claim are never
trusted. Binary formats are recognised by their signatures (the `filetype` package); bytes
that decode as UTF-8 without NULs are text, HTML and SVG told apart because a browser would
run them."""

import filetype

SAMPLE_BYTES = 8192
OCTET_STREAM = "application/octet-stream"
# Types a browser renders and runs scripts in: never served inline, never with their type.
ACTIVE_TYPES = frozenset({"text/html", "image/svg+xml", "application/xhtml+xml", "text/xml"})

_DOCUMENT_TYPES = frozenset(
    {
        "application/pdf",
        "application/rtf",
        "application/epub+zip",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
        "application/vnd.oasis.opendocument.text",
        "application/vnd.oasis.opendocument.spreadsheet",
        "application/vnd.oasis.opendocument.presentation",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    }
)


def _text_sample(sample: bytes, complete: bool) -> str | None:
    """The sample as text, or None when it is not UTF-8 text (a cut multi-byte character at
    the end of a partial sample is allowed)."""
    if b"\x00" in sample:
        return None
    try:
        return sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        if complete or exc.start < len(sample) - 3:
            return None
        try:
            return sample[: exc.start].decode("utf-8")
        except UnicodeDecodeError:
            return None


def sniff_media_type(data: bytes) -> str:
    """The media type of `data`, from its first bytes."""
    sample = data[:SAMPLE_BYTES]
    if not sample:
        return OCTET_STREAM
    guess = filetype.guess_mime(sample)
    if guess == "video/webm" and webm_audio_only(sample):
        return "audio/webm"  # a browser's voice recording (MediaRecorder), not a video
    if guess:
        return guess
    text = _text_sample(sample, complete=len(data) <= SAMPLE_BYTES)
    if text is None:
        return OCTET_STREAM
    head = text.lstrip("\ufeff \t\r\n").lower()
    if head.startswith("<svg") or (head.startswith("<?xml") and "<svg" in head):
        return "image/svg+xml"
    if head.startswith(("<!doctype html", "<html", "<head", "<body", "<script")):
        return "text/html"
    if head.startswith("<?xml"):
        return "text/xml"
    if head.startswith("%pdf"):
        return "application/pdf"
    return "text/plain"


# EBML element ids of a WebM (Matroska) file's track list.
_SEGMENT, _TRACKS, _TRACK_ENTRY, _TRACK_TYPE = 0x18538067, 0x1654AE6B, 0xAE, 0x83
_CLUSTER = 0x1F43B675
_VIDEO_TRACK, _AUDIO_TRACK = 1, 2


def _vint(data: bytes, at: int, *, keep_marker: bool) -> tuple[int, int] | None:
    """An EBML variable-length integer at `at`: (value, its length), None when cut short."""
    if at >= len(data) or data[at] == 0:
        return None
    length = 8 - data[at].bit_length() + 1
    if at + length > len(data):
        return None
    value = data[at] if keep_marker else data[at] & (0xFF >> length)
    for byte in data[at + 1 : at + length]:
        value = (value << 8) | byte
    return value, length


def _elements(data: bytes, start: int, end: int):
    """(id, payload start, payload end) of the EBML elements in data[start:end], stopping at
    the first that does not parse; an unknown size runs to `end`."""
    at = start
    while at < end:
        ident = _vint(data, at, keep_marker=True)
        if ident is None:
            return
        size = _vint(data, at + ident[1], keep_marker=False)
        if size is None:
            return
        body = at + ident[1] + size[1]
        unknown = size[0] == (1 << (7 * size[1])) - 1
        stop = end if unknown else min(end, body + size[0])
        yield ident[0], body, stop
        at = stop


def webm_audio_only(sample: bytes) -> bool:
    """Whether a WebM file's track list (in its first bytes) has audio tracks and no video
    track: a browser's voice recording. False when the list is not in the sample."""
    types = []
    for ident, body, stop in _elements(sample, 0, len(sample)):
        if ident != _SEGMENT:
            continue
        for child, child_body, child_stop in _elements(sample, body, stop):
            if child == _CLUSTER:
                break
            if child != _TRACKS:
                continue
            for entry, entry_body, entry_stop in _elements(sample, child_body, child_stop):
                if entry != _TRACK_ENTRY:
                    continue
                for field, field_body, field_stop in _elements(sample, entry_body, entry_stop):
                    if field == _TRACK_TYPE and field_stop > field_body:
                        types.append(sample[field_stop - 1])
    return _AUDIO_TRACK in types and _VIDEO_TRACK not in types


def kind_for(media_type: str) -> str:
    """image, document, audio, video or other (the values of Attachment.Kind)."""
    if media_type in ACTIVE_TYPES:
        return "other"
    major = media_type.split("/", 1)[0]
    if major in ("image", "audio", "video"):
        return major
    if major == "text" or media_type in _DOCUMENT_TYPES:
        return "document"
    return "other"
