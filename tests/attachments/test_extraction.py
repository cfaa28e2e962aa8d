"""Extraction of documents' text through the processing registry, on real files built here:
stored with attachment_store, read by attachment_process in the bounded child; each bad input
ends `failed` with a reason a person can read, or `ready` with a note."""

import datetime

import pytest

from attachments.extraction.pages import PAGE_BREAK
from attachments.models import Attachment
from attachments.services import attachment_process, attachment_store
from tests.attachments.documents import (
    docx_bytes,
    encrypted_pdf,
    pdf_bytes,
    pptx_bytes,
    text_pdf,
    xlsx_bytes,
    zip_bomb_docx,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def enqueued(monkeypatch):
    """The files' queue is the test itself: it calls attachment_process."""
    sent = []
    monkeypatch.setattr(
        "attachments.services.current_app.send_task", lambda name, args: sent.append(*args)
    )
    return sent


@pytest.fixture
def extract(say):
    def extract(name: str, data: bytes, message=None) -> Attachment:
        stored = attachment_store(message=message or say(), name=name, data=data)
        assert stored.state == Attachment.State.PENDING
        return attachment_process(stored.pk)

    return extract


def pages(attachment: Attachment) -> list[str]:
    return attachment.extracted_text.split(PAGE_BREAK)


# --- Each format ------------------------------------------------------------------------


def test_a_pdf_with_a_text_layer_is_read_page_by_page(extract):
    done = extract("runbook.pdf", pdf_bytes([["Restart the queue", "then check"], ["Page two"]]))
    assert done.state == "ready", done.failure
    assert pages(done) == ["Restart the queue\nthen check", "Page two"]
    assert done.page_count == 2
    assert done.note == ""


def test_scanned_pages_are_reported_not_invented(extract, settings):
    settings.ATTACHMENTS_OCR = False
    scan = [["Cover letter"], None, None, None, None, None, ["Signed"], None]
    done = extract("contract.pdf", pdf_bytes(scan))
    assert done.state == "ready"
    assert done.page_count == 8
    assert pages(done) == ["Cover letter", "", "", "", "", "", "Signed", ""]
    assert done.note.startswith("Pages 2–6, 8 are scanned images without a text layer")
    # (with ATTACHMENTS_OCR off: tests/attachments/test_ocr.py reads them)


def test_a_docx_keeps_headings_paragraphs_and_tables_in_order(extract):
    data = docx_bytes(
        ["First the backups.", "Then the upgrade."],
        heading="Upgrade plan",
        table=[["host", "owner"], ["db-1", "Marco"]],
    )
    done = extract("plan.docx", data)
    assert done.state == "ready", done.failure
    assert done.extracted_text == (
        "# Upgrade plan\nFirst the backups.\nThen the upgrade.\nhost | owner\ndb-1 | Marco"
    )
    assert done.page_count == 1


def test_an_xlsx_is_read_sheet_by_sheet(extract):
    rows = [
        ["item", "cost", "bought", "paid"],
        ["tea", 3.5, datetime.date(2026, 1, 2), True],
        [None, None],
        ["cake", 4, datetime.datetime(2026, 1, 2, 10, 30), False],
        [None, "gap", None, None, "far"],
    ]
    done = extract("budget.xlsx", xlsx_bytes({"Budget": rows, "Notes": []}))
    assert done.state == "ready", done.failure
    assert pages(done) == [
        "Sheet: Budget (rows 1–5)\nitem\tcost\tbought\tpaid\ntea\t3.5\t2026-01-02\tTRUE\n"
        "cake\t4\t2026-01-02 10:30:00\tFALSE\n\tgap\t\t\tfar",
        "Sheet: Notes (empty)",
    ]


def test_a_long_sheet_is_paged_with_its_rows_named(extract):
    rows = [[f"row {n}", n, "x" * 40] for n in range(1, 401)]
    done = extract("long.xlsx", xlsx_bytes({"Log": rows}))
    assert done.page_count == len(pages(done)) > 3
    assert all(page.startswith("Sheet: Log (rows ") for page in pages(done))
    assert "row 400\t400" in pages(done)[-1]


def test_a_pptx_is_one_page_per_slide(extract):
    done = extract("deck.pptx", pptx_bytes([("Q3 results", "Revenue up"), ("Next", "Hiring")]))
    assert done.state == "ready", done.failure
    assert pages(done) == ["Q3 results\nRevenue up", "Next\nHiring"]
    assert done.page_count == 2


def test_html_is_read_without_its_scripts_and_markup(extract):
    page = (
        b"<!doctype html><html><head><title>Status</title><script>alert('x')</script>"
        b"<style>p{color:red}</style></head><body><h2>Incidents</h2><p>None <b>today</b>."
        b"</p><ul><li>db ok</li><li>queue ok</li></ul></body></html>"
    )
    done = extract("status.html", page)
    assert done.state == "ready", done.failure
    assert done.extracted_text == "Status\n\n## Incidents\n\nNone today.\n\n- db ok\n- queue ok"


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("rota.csv", "name,day\nMarco,Mon\n王芳,Tue\n".encode()),
        ("README.md", b"# Setup\n\n- run `make`\n"),
        ("deploy.py", b"def deploy():\n    return 'ok'\n"),
    ],
)
def test_csv_markdown_and_source_code_are_kept_as_written(extract, name, data):
    done = extract(name, data)
    assert done.state == "ready", done.failure
    assert done.extracted_text == data.decode().rstrip("\n")


def test_long_text_is_paged_at_line_ends_and_a_form_feed_cannot_fake_a_page(extract):
    lines = [f"line {n} " + "word " * 12 for n in range(1, 400)]
    data = ("\f".join(lines[:2]) + "\n" + "\n".join(lines[2:])).encode()
    done = extract("log.txt", data)
    assert done.page_count == len(pages(done)) > 1
    assert all(len(page) <= 4000 for page in pages(done))
    assert pages(done)[0].startswith(f"{lines[0]}\n{lines[1]}\n")  # the \f became a newline
    assert "\n".join(pages(done)).split("\n") == [line for line in lines]


# --- Caps -------------------------------------------------------------------------------


def test_stored_text_is_capped_and_the_note_says_so(extract, settings):
    settings.ATTACHMENTS_EXTRACT_MAX_CHARS = 5000
    done = extract("report.pdf", text_pdf(20))
    assert done.state == "ready"
    assert len(done.extracted_text) == 5000
    assert done.page_count == 20
    assert "cut at 5,000 characters" in done.note
    assert "were not read" in done.note


def test_a_pdf_of_ten_thousand_pages_is_read_up_to_the_page_cap(extract, settings):
    settings.ATTACHMENTS_EXTRACT_MAX_PAGES = 30
    done = extract("huge.pdf", text_pdf(10_000, lines_per_page=1))
    assert done.state == "ready", done.failure
    assert done.page_count == 10_000
    assert len(pages(done)) == 30
    assert pages(done)[-1].startswith("Page 30 line 1")
    assert done.note == "Only the first 30 of 10,000 pages were read; pages 31–10,000 were not."


# --- Bad input --------------------------------------------------------------------------


def test_an_encrypted_pdf_says_it_is_password_protected(extract):
    done = extract("secret.pdf", encrypted_pdf())
    assert done.state == "failed"
    assert done.failure == "The PDF is password-protected; send a copy without a password."
    assert done.extracted_text == ""


def test_a_pdf_with_broken_cross_references_is_rebuilt_and_read(extract):
    done = extract("broken.pdf", pdf_bytes([["still readable"]], break_xref=True))
    assert done.state == "ready", done.failure
    assert done.extracted_text == "still readable"


def test_a_pdf_that_is_only_a_header_is_damaged(extract):
    done = extract("torn.pdf", b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog")
    assert (done.state, done.failure) == ("failed", "The PDF is damaged and could not be read.")


def test_a_zip_bomb_inside_a_docx_is_refused_before_unpacking(extract):
    done = extract("bomb.docx", zip_bomb_docx(expanded_mb=100))
    assert done.state == "failed"
    assert "word/document.xml" in done.failure
    assert "decompression bomb" in done.failure


def test_a_reader_over_its_memory_bound_fails_the_file_not_the_worker(extract, settings):
    """A DOCX that is no bomb (it packs only a few times) but whose body needs far more
    memory than the child may take: the child dies of its own bound."""
    import io
    import random
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(docx_bytes(["x"])))
    out = io.BytesIO()
    words = random.Random(7)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as big:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "word/document.xml":
                head, tail = data.split(b"<w:body>", 1)
                body = b"".join(
                    b"<w:p><w:r><w:t>%08x</w:t></w:r></w:p>" % words.getrandbits(32)
                    for _ in range(400_000)
                )
                data = head + b"<w:body>" + body + tail
            big.writestr(item, data)
    settings.ATTACHMENTS_EXTRACT_MEMORY_MB = 128
    done = extract("big.docx", out.getvalue())
    assert done.state == "failed"
    assert "128 MB of memory" in done.failure
    again = extract("small.docx", docx_bytes(["the worker still reads"]))
    assert again.extracted_text == "the worker still reads"


def test_a_reader_over_its_time_bound_is_stopped(extract, settings):
    settings.ATTACHMENTS_EXTRACT_SECONDS = 0.001  # no child starts that fast
    done = extract("slow.pdf", text_pdf(3))
    assert done.state == "failed"
    assert done.failure.startswith("Reading the file took longer than 0.001 seconds")


def test_bytes_decide_what_is_read_not_the_name(extract, say, png):
    done = extract("holiday.png", pdf_bytes([["a PDF in disguise"]]))
    assert (done.media_type, done.extracted_text) == ("application/pdf", "a PDF in disguise")
    picture = attachment_store(message=say(), name="report.pdf", data=png)
    assert picture.state == "ready"  # an image: no document processor wants it
    assert picture.extracted_text == ""


def test_a_zero_byte_file_is_failed_without_processing(say, enqueued):
    empty = attachment_store(message=say(), name="empty.pdf", data=b"")
    assert (empty.state, empty.failure) == ("failed", "The file is empty (0 bytes).")
    assert enqueued == []


def test_path_characters_in_a_name_never_reach_the_file_system(extract):
    done = extract("../../etc/passwd.pdf", pdf_bytes([["harmless"]]))
    assert done.name == "passwd.pdf"
    assert (done.state, done.extracted_text) == ("ready", "harmless")


def test_a_document_kind_the_hub_does_not_read_says_so(extract):
    done = extract("minutes.rtf", b"{\\rtf1\\ansi The minutes.}")
    assert done.media_type == "application/rtf"
    assert (done.state, done.failure) == (
        "failed",
        "The hub cannot read the text of RTF files yet; send it as PDF, DOCX, XLSX, PPTX or "
        "plain text.",
    )
