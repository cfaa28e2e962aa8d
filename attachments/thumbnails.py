"""Thumbnails of images for the dashboard: a bounded WebP made once per blob by Pillow,
kept beside the blob in the attachments' storage (the sweep deletes it with the blob).

Only raster images of an allow-list of types (sniffed from the bytes) are ever shown in a
page: PNG, JPEG, GIF and WebP. SVG, HTML and anything else never render inline, and a
thumbnail is always re-encoded by Pillow, so a polyglot (an image that is also HTML) loses
whatever else it was. Decompression bombs are refused from the header, before any pixel is
decoded: at most THUMBNAIL_MAX_PIXELS (JPEG: THUMBNAIL_MAX_JPEG_PIXELS, decoded at a reduced
scale) pixels.
"""

import io
import logging
from typing import IO

from django.core.files.base import ContentFile

from attachments.models import Attachment, attachment_storage

logger = logging.getLogger(__name__)

INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_PILLOW_FORMATS = ["PNG", "JPEG", "GIF", "WEBP"]
THUMBNAIL_SIDE = 320
# A 25-megapixel RGBA image is 100 MB decoded: the most a page view may make the web
# process hold. JPEG is decoded at 1/8 scale (Pillow's draft mode), so a 100-megapixel
# photo costs about 1.6 megapixels.
THUMBNAIL_MAX_PIXELS = 25_000_000
THUMBNAIL_MAX_JPEG_PIXELS = 100_000_000
THUMBNAIL_TYPE = "image/webp"


class NoThumbnail(Exception):
    """This image gets no thumbnail: `str(exc)` says why (its card still offers the file)."""


def shows_inline(attachment: Attachment) -> bool:
    """May the page show this file as an image (thumbnail, full view)? Its bytes were sniffed
    as one of the allow-listed raster types, and they are stored."""
    return attachment.media_type in INLINE_IMAGE_TYPES and attachment.blob_id is not None


def thumbnail_name(sha256: str) -> str:
    return f"thumbnails/{sha256[:2]}/{sha256}-{THUMBNAIL_SIDE}.webp"


def thumbnail_make(data: IO[bytes]) -> bytes:
    """A WebP of at most THUMBNAIL_SIDE pixels a side, of the first frame; NoThumbnail for a
    file Pillow cannot read or whose size passes the bounds (checked before decoding)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(data, formats=_PILLOW_FORMATS) as image:
            width, height = image.size
            limit = THUMBNAIL_MAX_JPEG_PIXELS if image.format == "JPEG" else THUMBNAIL_MAX_PIXELS
            if width * height > limit:
                raise NoThumbnail(
                    f"The image is {width} × {height} pixels: too large to preview "
                    f"(at most {limit // 1_000_000} megapixels)."
                )
            if image.format == "JPEG":
                image.draft("RGB", (THUMBNAIL_SIDE, THUMBNAIL_SIDE))
            image.seek(0)
            frame = image.convert("RGBA" if _has_alpha(image) else "RGB")
            frame.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
            out = io.BytesIO()
            frame.save(out, format="WEBP", quality=80, method=4)
            return out.getvalue()
    except NoThumbnail:
        raise
    except Image.DecompressionBombError as exc:  # past Pillow's own bound, at open
        raise NoThumbnail(
            "The image is too large to preview "
            f"(at most {THUMBNAIL_MAX_PIXELS // 1_000_000} megapixels)."
        ) from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise NoThumbnail("The image could not be read.") from exc


def _has_alpha(image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info
    )


def attachment_thumbnail(attachment: Attachment) -> bytes:
    """The attachment's thumbnail, made once per blob and kept beside it. NoThumbnail for a
    file that is not an allow-listed image or that cannot be previewed."""
    if not shows_inline(attachment):
        raise NoThumbnail("Only PNG, JPEG, GIF and WebP images are previewed.")
    storage = attachment_storage()
    name = thumbnail_name(attachment.sha256)
    try:
        with storage.open(name, "rb") as kept:
            return kept.read()
    except (FileNotFoundError, OSError):
        pass
    with attachment.blob.file.open("rb") as data:
        thumbnail = thumbnail_make(data)
    try:
        saved = storage.save(name, ContentFile(thumbnail))
        if saved != name:  # made at the same moment by another request: keep one
            storage.delete(saved)
    except Exception:  # noqa: BLE001 - a storage error costs a remake next time, nothing more
        logger.exception("could not keep the thumbnail of blob %s", attachment.sha256)
    return thumbnail


def thumbnail_delete(sha256: str) -> None:
    """Delete a blob's thumbnail, if one was made (the sweep, with its blob)."""
    attachment_storage().delete(thumbnail_name(sha256))
