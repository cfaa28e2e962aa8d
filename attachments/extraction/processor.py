"""The document processor of the attachments' registry: which stored files it reads, and
reading one (its blob copied to a temporary file, the child bounded by the settings
ATTACHMENTS_EXTRACT_SECONDS and ATTACHMENTS_EXTRACT_MEMORY_MB, the text capped at
ATTACHMENTS_EXTRACT_MAX_CHARS and PDFs at ATTACHMENTS_EXTRACT_MAX_PAGES pages; scanned PDF
pages read by OCR when ATTACHMENTS_OCR is on, at most ATTACHMENTS_OCR_MAX_PAGES a file within
ATTACHMENTS_OCR_MEMORY_MB).

Each file read is recorded in usage as kind "extraction" (through `chats.signals.model_usage`,
attributed like the file's message): `calls` are the pages read and `duration_ms` the time
the child took; no model, no tokens, never priced, so no budget is spent on it."""

import logging
import shutil
import tempfile
import time
from pathlib import Path

from django.conf import settings

from attachments.extraction.runner import ExtractionFailed, extract_file
from attachments.processing import Derived, ProcessingFailed
from chats.signals import model_usage

logger = logging.getLogger(__name__)

PROCESSOR_NAME = "documents"

# Media types sniffed from the bytes (attachments/sniffing.py) -> the child's reader. CSV,
# Markdown and source code sniff as text/plain: read as text.
FORMATS = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/plain": "text",
    "text/csv": "text",
    "text/markdown": "text",
}

_NOT_READ = {
    "application/msword": "Word 97–2003 (.doc)",
    "application/vnd.ms-excel": "Excel 97–2003 (.xls)",
    "application/vnd.ms-powerpoint": "PowerPoint 97–2003 (.ppt)",
    "application/rtf": "RTF",
    "application/epub+zip": "EPUB",
}


def wants_document(attachment) -> bool:
    """Every document (the kind sniffing gave) and HTML; no I/O."""
    return attachment.kind == "document" or attachment.media_type in FORMATS


def file_format(media_type: str) -> str:
    """The reader for `media_type`, or ProcessingFailed naming a kind the hub does not read."""
    if media_type in FORMATS:
        return FORMATS[media_type]
    label = _NOT_READ.get(media_type, media_type)
    raise ProcessingFailed(
        f"The hub cannot read the text of {label} files yet; send it as PDF, DOCX, XLSX, "
        "PPTX or plain text."
    )


def extract_document(attachment) -> Derived:
    """The text of one stored document, read in a bounded child process (processing.py's
    `run`): its pages joined by form feeds, its page count, and a note on what was not
    read (scanned pages, pages past the cap, text past the cap)."""
    reader = file_format(attachment.media_type)
    if attachment.blob is None:
        raise ProcessingFailed("The file's bytes are missing.")
    with tempfile.TemporaryDirectory(prefix="hub-extract-") as folder:
        path = Path(folder) / f"document.{reader}"
        with attachment.blob.file.open("rb") as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target, 1024 * 1024)
        started = time.monotonic()
        try:
            result = extract_file(
                path,
                reader,
                seconds=settings.ATTACHMENTS_EXTRACT_SECONDS,
                memory_mb=settings.ATTACHMENTS_EXTRACT_MEMORY_MB,
                max_chars=settings.ATTACHMENTS_EXTRACT_MAX_CHARS,
                max_pages=settings.ATTACHMENTS_EXTRACT_MAX_PAGES,
                ocr_max_pages=settings.ATTACHMENTS_OCR_MAX_PAGES if settings.ATTACHMENTS_OCR else 0,
                ocr_memory_mb=settings.ATTACHMENTS_OCR_MEMORY_MB,
            )
        except ExtractionFailed as exc:
            raise ProcessingFailed(str(exc)) from exc
        elapsed_ms = round((time.monotonic() - started) * 1000)
    _record_usage(attachment, pages_read(result.text), elapsed_ms)
    notes = list(result.notes)
    if not result.text.strip() and not notes:
        notes.append("The file has no text.")
    return Derived(
        extracted_text=result.text,
        page_count=result.page_count,
        note=" ".join(notes),
        extra={"peak_rss_kb": result.peak_rss_kb},
    )


def pages_read(text: str) -> int:
    """The pages the stored text holds (joined by form feeds); 0 for no text."""
    return text.count("\f") + 1 if text else 0


def _record_usage(attachment, pages: int, duration_ms: int) -> None:
    """The reading in usage (kind "extraction"); a receiver's failure is logged, never the
    file's."""
    if not pages:
        return
    for receiver, result in model_usage.send_robust(
        sender=type(attachment),
        kind="extraction",
        chat_id=attachment.message.chat_id,
        turn=None,
        message_id=attachment.message_id,
        model="",
        calls=pages,
        prompt_tokens=0,
        completion_tokens=0,
        duration_ms=duration_ms,
    ):
        if isinstance(result, Exception):
            logger.error("model_usage receiver %r failed", receiver, exc_info=result)
