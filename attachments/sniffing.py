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
