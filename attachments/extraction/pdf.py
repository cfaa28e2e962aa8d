"""PDF text through PDFium (pypdfium2): page by page, up to a page cap, telling apart the
pages that have no text layer but an image (scanned). Runs in the extraction child."""

from attachments.extraction.pages import Extracted, PageSink, Unreadable, page_ranges


def _has_image(page, raw) -> bool:
    return any(item.type == raw.FPDF_PAGEOBJ_IMAGE for item in page.get_objects(max_depth=2))


def read_pdf(path: str, sink: PageSink, *, max_pages: int, ocr=None) -> Extracted:
    """The text of the first `max_pages` pages; a note names the scanned pages (read by
    `ocr`, an OcrReader, when given, up to its cap and time), the pages past the cap, and
    where the text was cut."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    try:
        document = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code == raw.FPDF_ERR_PASSWORD:
            raise Unreadable(
                "The PDF is password-protected; send a copy without a password."
            ) from exc
        if code == raw.FPDF_ERR_SECURITY:
            raise Unreadable("The PDF uses an encryption the hub cannot read.") from exc
        raise Unreadable("The PDF is damaged and could not be read.") from exc
    notes: list[str] = []
    scanned: list[int] = []
    try:
        total = len(document)
        if total == 0:
            raise Unreadable("The PDF has no pages.")
        for read, index in enumerate(range(min(total, max_pages)), start=1):
            page = document[index]
            try:
                textpage = page.get_textpage()
                try:
                    text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n")
                finally:
                    textpage.close()
                if not text.strip() and _has_image(page, raw):
                    read_by_ocr = ocr.page_text(page, index + 1) if ocr else None
                    if read_by_ocr is None:
                        scanned.append(index + 1)
                    else:
                        text = read_by_ocr
            finally:
                page.close()
            if not sink.add(text):
                if read < total:
                    notes.append(
                        f"The text was cut at {sink.max_chars:,} characters, in page {read}; "
                        f"pages {read + 1}–{total} were not read."
                    )
                else:
                    notes.append(f"The text was cut at {sink.max_chars:,} characters.")
                break
        else:
            if total > max_pages:
                notes.append(
                    f"Only the first {max_pages:,} of {total:,} pages were read; "
                    f"pages {max_pages + 1:,}–{total:,} were not."
                )
    finally:
        document.close()
    if scanned:
        which = "page" if len(scanned) == 1 else "pages"
        verb = "is a scanned image" if len(scanned) == 1 else "are scanned images"
        notes.insert(
            0,
            f"{which.capitalize()} {page_ranges(scanned)} {verb} without a text "
            f"layer: {'its' if len(scanned) == 1 else 'their'} {_why_not_read(ocr)}",
        )
    if ocr and ocr.read:
        which = "Page" if len(ocr.read) == 1 else "Pages"
        notes.insert(
            0,
            f"{which} {page_ranges(ocr.read)} {'was' if len(ocr.read) == 1 else 'were'} read "
            "by OCR (machine-read from a scanned image: words may be wrong).",
        )
    return Extracted(sink.text(), total, notes)


def _why_not_read(ocr) -> str:
    if ocr is None:
        return "text was not read (OCR is off on this hub)."
    if ocr.unavailable:
        return "text was not read (OCR could not start on this hub)."
    if ocr.out_of_time:
        return "text was not read (OCR ran out of time)."
    pages = "page" if ocr.max_pages == 1 else "pages"
    return f"text was not read (OCR reads at most {ocr.max_pages} {pages} a file)."
