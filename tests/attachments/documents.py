"""Real documents built here, for the extraction tests and bench/attachments_bench.py: PDFs
written by hand (with a text layer, scanned-looking pages that are only an image, broken
cross-references), DOCX, XLSX and PPTX through the libraries that write them, and a zip bomb
inside a DOCX. Nothing is read from a fixture file."""

import io
import zipfile
import zlib
from collections.abc import Iterable, Sequence

# --- PDF, written by hand ---------------------------------------------------------------


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _text_stream(lines: Sequence[str]) -> bytes:
    ops = ["BT", "/F1 11 Tf", "14 TL", "72 760 Td"]
    for line in lines:
        ops.append(f"({_pdf_escape(line)}) Tj T*")
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def _image_stream() -> bytes:
    # Paint the page's image XObject over the whole page, as a scanner's PDF does.
    return b"q 612 0 0 792 0 0 cm /Im1 Do Q"


def pdf_bytes(pages: Iterable[Sequence[str] | None], *, break_xref: bool = False) -> bytes:
    """A PDF whose pages hold the given lines of text; a page given as None is a scanned
    page: one grey image and no text layer. `break_xref` points every cross-reference entry
    at a wrong offset (readers must rebuild the table or fail)."""
    pages = list(pages)
    objects: list[bytes] = []  # object n is objects[n - 1]

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    pixels = zlib.compress(bytes([200]) * (32 * 32))
    image = add(
        b"<< /Type /XObject /Subtype /Image /Width 32 /Height 32 /ColorSpace /DeviceGray "
        b"/BitsPerComponent 8 /Filter /FlateDecode /Length %d >>\nstream\n"
        % len(pixels)
        + pixels
        + b"\nendstream"
    )
    kids = []
    for lines in pages:
        content = _image_stream() if lines is None else _text_stream(lines)
        stream = add(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        resources = (
            b"<< /XObject << /Im1 %d 0 R >> >>" % image
            if lines is None
            else b"<< /Font << /F1 %d 0 R >> >>" % font
        )
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources %s "
                b"/Contents %d 0 R >>" % (tree, resources, stream)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % kid for kid in kids),
        len(kids),
    )
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % (offset + 7 if break_xref else offset))
    out.write(
        b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n"
        % (len(objects) + 1, catalog, xref + 3 if break_xref else xref)
    )
    return out.getvalue()


def text_pdf(page_count: int, *, lines_per_page: int = 40) -> bytes:
    """A PDF of `page_count` pages of text, each line naming its page."""
    return pdf_bytes(
        [
            [
                f"Page {page} line {line}: the quick brown fox jumps"
                for line in range(1, 1 + lines_per_page)
            ]
            for page in range(1, page_count + 1)
        ]
    )


def encrypted_pdf(text: str = "secret plans", password: str = "hunter2") -> bytes:
    """A PDF that opens only with a password (pypdf's writer, RC4: no extra package)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes([[text]]))))
    writer.encrypt(user_password=password, owner_password=password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --- Office documents -------------------------------------------------------------------


def docx_bytes(paragraphs: Sequence[str], *, heading: str | None = None, table=None) -> bytes:
    import docx

    document = docx.Document()
    if heading:
        document.add_heading(heading, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = str(value)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx_bytes(sheets: dict[str, Sequence[Sequence]]) -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(list(row))
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def pptx_bytes(slides: Sequence[tuple[str, str]]) -> bytes:
    import pptx

    presentation = pptx.Presentation()
    for title, body in slides:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def zip_bomb_docx(expanded_mb: int = 300) -> bytes:
    """A real DOCX whose word/document.xml unpacks to `expanded_mb` MB (mostly spaces inside
    the body), stored in well under 1 MB."""
    source = zipfile.ZipFile(io.BytesIO(docx_bytes(["harmless"])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename != "word/document.xml":
                bomb.writestr(item, data)
                continue
            head, tail = data.split(b"<w:body>", 1)
            with bomb.open("word/document.xml", "w", force_zip64=True) as part:
                part.write(head + b"<w:body>")
                block = b" " * (1024 * 1024)
                for _ in range(expanded_mb):
                    part.write(block)
                part.write(tail)
    return out.getvalue()


def scanned_pdf(pages: Sequence[Sequence[str]], *, font_size: int = 44) -> bytes:
    """An image-only PDF (as a scanner makes): each page the given lines of text drawn in
    black on white by Pillow and embedded as a picture, with no text layer."""
    from PIL import Image, ImageDraw, ImageFont

    font_path = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    try:
        font = ImageFont.truetype(font_path, font_size)
    except OSError:
        font = ImageFont.load_default(size=font_size)
    images = []
    for lines in pages:
        image = Image.new("RGB", (1240, 1754), "white")  # A4 at 150 dpi
        draw = ImageDraw.Draw(image)
        for row, line in enumerate(lines):
            draw.text((120, 160 + row * font_size * 2), line, fill="black", font=font)
        images.append(image)
    out = io.BytesIO()
    images[0].save(out, format="PDF", resolution=150, save_all=True, append_images=images[1:])
    return out.getvalue()
