"""Images as a model receives them: their size read from the header, what they cost in tokens,
and their bytes as a `data:` URL (kept for a while in this process, since every turn of the
chat sends them again).

Images go as received: PNG, JPEG, GIF and WebP, which every vision API takes; another
format Pillow reads (BMP, TIFF, ICO, …) is converted to PNG once. An image larger than
MAX_PIXELS (a decompression bomb, a 20,000 × 20,000 PNG) is never decoded or sent.
"""

import base64
import io
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from attachments.models import Attachment

SENDABLE = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_PIXELS = 40_000_000  # 40 megapixels: more than any camera photo a person sends
CACHE_CHARACTERS = 64 * 1024 * 1024  # data URLs kept in this process, in characters


class ImageUnusable(Exception):
    """The image cannot go to a model: `str(exc)` says why, for the model and people."""


@dataclass(frozen=True)
class PreparedImage:
    url: str  # a data: URL
    width: int
    height: int
    tokens: int


def image_tokens(width: int, height: int) -> int:
    """What an image costs at OpenAI's "high" detail (the default for large images): scaled
    to fit 2048 × 2048, then its short side to 768, then 170 tokens per 512-pixel tile plus
    85. Other providers count less or about as much (Anthropic: w × h / 750, at most ~1,600)."""
    if width <= 0 or height <= 0:
        return 85
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = min(1.0, 768 / min(width, height))
    width, height = width * scale, height * scale
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def _open(data: bytes) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as exc:
        raise ImageUnusable("it could not be read as an image") from exc
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise ImageUnusable(f"it is too large to show ({width:,} × {height:,} pixels)")
    return image


def _as_png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    try:
        image.save(buffer, format="PNG")
    except (OSError, ValueError) as exc:
        raise ImageUnusable("its format cannot be shown to a model") from exc
    return buffer.getvalue()


def prepare(media_type: str, data: bytes) -> PreparedImage:
    """The image as a data: URL with its size and token cost (ImageUnusable if it cannot go)."""
    image = _open(data)
    width, height = image.size
    if media_type not in SENDABLE:
        data, media_type = _as_png(image), "image/png"
    url = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    return PreparedImage(url, width, height, image_tokens(width, height))


_cache: OrderedDict[tuple[str, str], PreparedImage] = OrderedDict()
_cache_size = 0
_lock = threading.Lock()


def prepared_image(attachment: Attachment) -> PreparedImage:
    """`prepare` for a stored image, remembered by its blob (same bytes, same URL object: the
    token counter finds its cost again without re-reading megabytes)."""
    global _cache_size
    key = (attachment.sha256, attachment.media_type)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    if attachment.blob_id is None:
        raise ImageUnusable("its bytes are not stored")
    with attachment.blob.file.open("rb") as file:
        data = file.read()
    prepared = prepare(attachment.media_type, data)
    with _lock:
        if key not in _cache:
            _cache[key] = prepared
            _cache_size += len(prepared.url)
            while _cache_size > CACHE_CHARACTERS and len(_cache) > 1:
                _, evicted = _cache.popitem(last=False)
                _cache_size -= len(evicted.url)
    return prepared
