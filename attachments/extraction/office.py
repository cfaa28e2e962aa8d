"""DOCX, XLSX and PPTX text (python-docx, openpyxl in read-only mode, python-pptx), after a
look at the zip's directory that refuses decompression bombs before anything is unpacked.
Runs in the extraction child."""

import zipfile

from attachments.extraction.pages import (
    PAGE_CHARS,
    Extracted,
    PageSink,
    Unreadable,
    cut_notes,
    flowing_extracted,
    unreadable_unless_memory,
)

# A zip member may unpack to at most this many times its stored size once it is over
# BOMB_MIN_BYTES (real Office parts stay far below: XML compresses about 5–30 times).
BOMB_RATIO = 200
BOMB_MIN_BYTES = 20 * 1024 * 1024
MAX_EXPANDED_BYTES = 2 * 1024 * 1024 * 1024
MAX_MEMBERS = 20_000


def _size(size: int) -> str:
    if size >= 1024**3:
        return f"{size / 1024**3:.1f} GB"
    return f"{size / 1024**2:.0f} MB"


def check_zip(path: str, label: str) -> None:
    """Refuse a file that is not a readable zip, or that would unpack to far more than it is
    (Python's zipfile never unpacks more than a member's declared size, so the directory's
    sizes bound what any reader unpacks)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise Unreadable(f"The {label} file is damaged and could not be read.") from exc
    if len(members) > MAX_MEMBERS:
        raise Unreadable(
            f"The {label} file holds {len(members):,} parts (at most {MAX_MEMBERS:,} are read); "
            "it was not read."
        )
    expanded = sum(member.file_size for member in members)
    if expanded > MAX_EXPANDED_BYTES:
        raise Unreadable(
            f"The {label} file unpacks to {_size(expanded)} (at most "
            f"{_size(MAX_EXPANDED_BYTES)} is read): a decompression bomb? It was not read."
        )
    for member in members:
        if member.file_size > BOMB_MIN_BYTES and member.file_size > BOMB_RATIO * max(
            member.compress_size, 1
        ):
            raise Unreadable(
                f"A part of the {label} file ({member.filename}) unpacks from "
                f"{_size(member.compress_size)} to {_size(member.file_size)}: a decompression "
                "bomb. It was not read."
            )


# --- DOCX -------------------------------------------------------------------------------


def _docx_lines(document) -> list[str]:
    """The body in order: paragraphs (headings marked with #) and tables (cells by |)."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    lines: list[str] = []
    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            text = block.text
            style = (block.style.name if block.style is not None else "") or ""
            if style.startswith("Heading ") and style[8:].isdigit() and text.strip():
                text = "#" * min(int(style[8:]), 6) + " " + text
            elif style == "Title" and text.strip():
                text = "# " + text
            lines.append(text)
        elif isinstance(block, Table):
            for row in block.rows:
                cells = [cell.text.replace("\n", " ").strip() for cell in row.cells]
                lines.append(" | ".join(cells))
            lines.append("")
    return lines


def read_docx(path: str, sink: PageSink) -> Extracted:
    check_zip(path, "DOCX")
    import docx

    try:
        document = docx.Document(path)
    except Exception as exc:  # noqa: BLE001 - python-docx raises many kinds for a bad file
        raise unreadable_unless_memory(
            exc, "The DOCX file is damaged and could not be read."
        ) from exc
    text = "\n".join(_docx_lines(document)).strip("\n")
    return flowing_extracted(text, sink)


# --- XLSX -------------------------------------------------------------------------------


def read_xlsx(path: str, sink: PageSink) -> Extracted:
    """Each sheet's rows as tab-separated lines, in pages of about PAGE_CHARS characters,
    each headed "Sheet: NAME (rows A–B)"; empty rows are left out (xlsx.py streams them)."""
    check_zip(path, "XLSX")
    from attachments.extraction.xlsx import workbook_rows

    pages = 0
    try:
        for title, rows in workbook_rows(path):
            lines: list[str] = []
            size = 0
            first = None
            last = 0
            for number, cells in rows:
                line = "\t".join(cells)
                if lines and size + len(line) > PAGE_CHARS:
                    pages += 1
                    if not sink.add(_sheet_page(title, first, last, lines)):
                        return Extracted(sink.text(), pages, cut_notes(sink))
                    lines, size, first = [], 0, None
                if first is None:
                    first = number
                last = number
                lines.append(line)
                size += len(line) + 1
            pages += 1
            if not sink.add(_sheet_page(title, first, last, lines)):
                return Extracted(sink.text(), pages, cut_notes(sink))
    except (KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise Unreadable("The XLSX file is damaged and could not be read.") from exc
    except Exception as exc:  # noqa: BLE001 - lxml's parse errors, a memory error among them
        raise unreadable_unless_memory(
            exc, "The XLSX file is damaged and could not be read."
        ) from exc
    return Extracted(sink.text(), pages, cut_notes(sink))


def _sheet_page(title: str, first: int | None, last: int, lines: list[str]) -> str:
    if first is None:
        return f"Sheet: {title} (empty)"
    rows = f"row {first}" if first == last else f"rows {first}–{last}"
    return f"Sheet: {title} ({rows})\n" + "\n".join(lines)


# --- PPTX -------------------------------------------------------------------------------


def _shape_lines(shapes) -> list[str]:
    from pptx.shapes.group import GroupShape

    lines: list[str] = []
    for shape in shapes:
        if isinstance(shape, GroupShape):
            lines.extend(_shape_lines(shape.shapes))  # a group
        elif getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                lines.append(" | ".join(cell.text.replace("\n", " ") for cell in row.cells))
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            text = shape.text_frame.text.strip()
            if text:
                lines.append(text)
    return lines


def read_pptx(path: str, sink: PageSink) -> Extracted:
    """One page per slide: its shapes' text, then its speaker notes."""
    check_zip(path, "PPTX")
    import pptx

    try:
        presentation = pptx.Presentation(path)
    except Exception as exc:  # noqa: BLE001 - python-pptx raises many kinds for a bad file
        raise unreadable_unless_memory(
            exc, "The PPTX file is damaged and could not be read."
        ) from exc
    slides = list(presentation.slides)
    for slide in slides:
        lines = _shape_lines(slide.shapes)
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                lines.append("Notes: " + notes.text.strip())
        if not sink.add("\n".join(lines)):
            break
    return Extracted(sink.text(), len(slides), cut_notes(sink))
