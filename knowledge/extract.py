"""The text of one file for a collection, through the attachments' extraction: the bytes are
sniffed (attachments.sniffing), plain text (Markdown, reStructuredText, source, logs) is
decoded here, and every other document format (PDF, DOCX, XLSX, PPTX, HTML) is read by the
attachments' child process (attachments.extraction.runner) under its time and memory bounds,
so a bomb or a hang fails that file only. Binary junk is refused by its sniffed type.
"""

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from attachments.extraction.runner import ExtractionFailed, extract_file
from attachments.sniffing import SAMPLE_BYTES, sniff_media_type

# Media types -> the child's reader; text/plain is decoded in-process (no child start for
# each of thousands of Markdown files).
CHILD_FORMATS = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "text/html": "html",
    "application/xhtml+xml": "html",
}
# Formats whose form feeds are real pages (a PDF's pages, a deck's slides, a sheet's parts).
PAGED = {"pdf", "pptx", "xlsx"}


class Unreadable(Exception):
    """The file gives no text: `str(exc)` is the reason stored on the document."""


@dataclass(frozen=True)
class FileText:
    text: str
    media_type: str
    paged: bool
    page_count: int


def read_file(path: Path, *, size: int) -> FileText:
    """The text of the file at `path` (already opened safely by the caller and `size` bytes
    long), or Unreadable with the reason."""
    if size > settings.KNOWLEDGE_MAX_FILE_BYTES:
        raise Unreadable(
            f"The file is {size:,} bytes; the most a collection reads is "
            f"{settings.KNOWLEDGE_MAX_FILE_BYTES:,} (KNOWLEDGE_MAX_FILE_BYTES)."
        )
    with open(path, "rb") as file:
        # One byte past the sample tells the sniffer the sample is not the whole file.
        head = file.read(SAMPLE_BYTES + 1)
    media_type = sniff_media_type(head)
    if media_type in ("text/plain", "text/csv", "text/markdown", "text/xml"):
        return _plain(path, media_type)
    reader = CHILD_FORMATS.get(media_type)
    if reader is None:
        raise Unreadable(f"The file is {media_type}, which has no text the hub reads.")
    try:
        result = extract_file(
            path,
            reader,
            seconds=settings.ATTACHMENTS_EXTRACT_SECONDS,
            memory_mb=settings.ATTACHMENTS_EXTRACT_MEMORY_MB,
            max_chars=settings.ATTACHMENTS_EXTRACT_MAX_CHARS,
            max_pages=settings.ATTACHMENTS_EXTRACT_MAX_PAGES,
        )
    except ExtractionFailed as exc:
        raise Unreadable(str(exc)) from exc
    if not result.text.strip():
        raise Unreadable(" ".join(result.notes) or "The file has no text.")
    return FileText(result.text, media_type, reader in PAGED, result.page_count)


def _plain(path: Path, media_type: str) -> FileText:
    limit = settings.ATTACHMENTS_EXTRACT_MAX_CHARS
    with open(path, "rb") as file:
        data = file.read(limit * 4 + 4)
    if b"\x00" in data:
        raise Unreadable("The file holds NUL bytes: it is binary, not text.")
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    if text.count("\ufffd") > max(8, len(text) // 100):
        raise Unreadable("The file is not UTF-8 text.")
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")[:limit]
    if not text.strip():
        raise Unreadable("The file has no text.")
    return FileText(text, media_type, False, 1)
