"""Offline OCR of scanned PDF pages and of images' text, in the extraction child only (no
Django here).

The engine is RapidOCR on ONNX Runtime (`rapidocr-onnxruntime`): its detection and
recognition models (PP-OCRv4, Chinese and English) ship inside the wheel, so nothing is
downloaded at run time. It loads lazily, the first time a page needs it, never in the web
process or a worker: only the child imports this module's engine.

The engine needs more address space than the text readers (ONNX Runtime and OpenCV map
~1 GB), so the child starts with the readers' bound as its soft limit and the OCR bound as
its hard one; `OcrReader.page_text` raises the soft limit to the hard one before the engine
loads. A page is rendered at `DPI` and at most `MAX_SIDE` pixels on its longer side.
"""

import resource
import time

DPI = 150
MAX_SIDE = 2000


class OcrReader:
    """Reads up to `max_pages` scanned pages, until `deadline` (time.monotonic())."""

    def __init__(self, *, max_pages: int, deadline: float):
        self.max_pages = max_pages
        self.deadline = deadline
        self.read: list[int] = []  # 1-based page numbers read by OCR
        self.skipped: list[int] = []  # scanned pages not read: the cap, or out of time
        self.out_of_time = False
        self.unavailable = ""  # why the engine could not load (a missing system library)
        self._engine = None

    def engine(self):
        """The engine, loaded on first use (raising the address-space limit first)."""
        if self._engine is None:
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard != resource.RLIM_INFINITY and soft < hard:
                resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
            from rapidocr_onnxruntime import RapidOCR

            # One thread: the machine's cores are shared with the workers and the web.
            self._engine = RapidOCR(
                intra_op_num_threads=1, inter_op_num_threads=1, print_verbose=False
            )
        return self._engine

    def page_text(self, page, number: int) -> str | None:
        """The text OCR reads on `page` (page `number`, 1-based), or None when the cap or
        the time left says it is not read."""
        if (
            self.unavailable
            or len(self.read) >= self.max_pages
            or time.monotonic() >= self.deadline
        ):
            self.out_of_time = self.out_of_time or time.monotonic() >= self.deadline
            self.skipped.append(number)
            return None
        import numpy

        width, height = page.get_size()
        scale = min(DPI / 72, MAX_SIDE / max(width, height, 1))
        bitmap = page.render(scale=scale, grayscale=False)
        try:
            image = numpy.ascontiguousarray(bitmap.to_numpy()[:, :, :3])  # BGR(A) -> BGR
        finally:
            bitmap.close()
        try:
            engine = self.engine()
        except ImportError as exc:  # e.g. OpenCV without libGL.so.1: report, do not fail
            _memory_or(exc)
            self.unavailable = str(exc).split(":")[0][:200] or type(exc).__name__
            self.skipped.append(number)
            return None
        found, _elapsed = engine(image)
        self.read.append(number)
        return lines_in_reading_order(found or [])


def _memory_or(exc: ImportError) -> None:
    """An engine's library that could not be mapped for want of address space is a memory
    failure (MemoryError: the OCR bound's reason), not a missing library."""
    said = str(exc).lower()
    if "failed to map segment" in said or "cannot allocate memory" in said:
        raise MemoryError from exc


def lines_in_reading_order(found: list) -> str:
    """RapidOCR's boxes ([[corners], text, score]) as lines: top to bottom, boxes whose
    vertical middles are within half a line of each other joined left to right."""
    boxes = []
    for corners, text, _score in found:
        ys = [point[1] for point in corners]
        xs = [point[0] for point in corners]
        boxes.append(((min(ys) + max(ys)) / 2, max(ys) - min(ys), min(xs), str(text)))
    boxes.sort()
    lines: list[list[tuple[float, str]]] = []
    last_middle, last_height = None, 0.0
    for middle, height, left, text in boxes:
        if last_middle is not None and abs(middle - last_middle) <= max(height, last_height) / 2:
            lines[-1].append((left, text))
        else:
            lines.append([(left, text)])
            last_middle, last_height = middle, height
    return "\n".join(" ".join(text for _left, text in sorted(line)) for line in lines)


# An image's pixels at most, before decoding (a decompression bomb is refused unread).
IMAGE_MAX_PIXELS = 40_000_000


def read_image_text(path: str, sink, ocr: OcrReader):
    """The text OCR reads in an image file (PNG, JPEG, WebP, GIF's first frame, BMP, TIFF):
    one page; the image is scaled to at most MAX_SIDE pixels a side first."""
    import numpy
    from PIL import Image, UnidentifiedImageError

    from attachments.extraction.pages import Extracted, Unreadable

    Image.MAX_IMAGE_PIXELS = None  # checked below, before any pixel is decoded
    try:
        with Image.open(path) as image:
            width, height = image.size
            if width * height > IMAGE_MAX_PIXELS:
                raise Unreadable(
                    f"The image is {width:,} × {height:,} pixels: the hub reads the text of "
                    f"images of at most {IMAGE_MAX_PIXELS // 1_000_000} million pixels."
                )
            image.draft("RGB", (MAX_SIDE, MAX_SIDE))  # JPEG: decode at a smaller scale
            image = image.convert("RGB")
            image.thumbnail((MAX_SIDE, MAX_SIDE))
            pixels = numpy.ascontiguousarray(numpy.asarray(image)[:, :, ::-1])  # RGB -> BGR
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise Unreadable("The image could not be read.") from exc
    try:
        engine = ocr.engine()
    except ImportError as exc:
        _memory_or(exc)
        raise Unreadable("OCR could not start on this hub (a library is missing).") from exc
    found, _elapsed = engine(pixels)
    text = lines_in_reading_order(found or [])
    sink.add(text)
    notes = (
        ["The text was read from the image by OCR (machine-read: words may be wrong)."]
        if text.strip()
        else ["OCR found no text in the image."]
    )
    return Extracted(sink.text(), 1, notes)
