"""The image-text processor of the attachments' registry: the text in an image (a screenshot
of an error, a photo of a whiteboard) read by OCR in the bounded extraction child, for a hub
that cannot show the image to its model: its model takes no images (LLM_VISION) and no vision
model describes them (VISION_LLM_MODEL). The model is still told it cannot see the image;
it gets the machine-read text beside that (attachments/to_model.py), and search can find it.
With a vision path, the image itself (or its description) says more, and no OCR is spent."""

import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from attachments.describe import main_model_takes_images
from attachments.extraction.runner import ExtractionFailed, extract_file
from attachments.processing import Derived, ProcessingFailed

PROCESSOR_NAME = "image-text"

# What Pillow decodes in the child (sniffed from the bytes: attachments/sniffing.py).
READABLE = {"image/png", "image/jpeg", "image/webp", "image/gif", "image/bmp", "image/tiff"}


def wants_image_text(attachment) -> bool:
    """An image whose text OCR reads: OCR and ATTACHMENTS_OCR_IMAGES on, and no other way for
    the model to see it."""
    return (
        attachment.kind == "image"
        and attachment.media_type in READABLE
        and settings.ATTACHMENTS_OCR
        and settings.ATTACHMENTS_OCR_IMAGES
        and not settings.VISION_LLM_MODEL
        and not main_model_takes_images()
    )


def read_image_text(attachment) -> Derived:
    if attachment.blob is None:
        raise ProcessingFailed("The image's bytes are missing.")
    with tempfile.TemporaryDirectory(prefix="hub-ocr-") as folder:
        path = Path(folder) / "image"
        with attachment.blob.file.open("rb") as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target, 1024 * 1024)
        try:
            result = extract_file(
                path,
                "image",
                seconds=settings.ATTACHMENTS_EXTRACT_SECONDS,
                memory_mb=settings.ATTACHMENTS_EXTRACT_MEMORY_MB,
                max_chars=settings.ATTACHMENTS_EXTRACT_MAX_CHARS,
                max_pages=1,
                ocr_max_pages=1,
                ocr_memory_mb=settings.ATTACHMENTS_OCR_MEMORY_MB,
            )
        except ExtractionFailed as exc:
            raise ProcessingFailed(str(exc)) from exc
    return Derived(
        extracted_text=result.text,
        page_count=1,
        note=" ".join(result.notes),
        extra={"peak_rss_kb": result.peak_rss_kb},
    )
