"""OCR of scanned PDF pages in the extraction child (attachments/extraction/ocr.py): real
image-only PDFs drawn here by Pillow, read by the real engine (rapidocr-onnxruntime, its
models from its wheel) in the bounded child; the page cap, the setting off, and the engine
never loaded by the web process."""

import subprocess
import sys

import pytest
from django.conf import settings as django_settings

from attachments.extraction.pages import PAGE_BREAK
from attachments.services import attachment_process, attachment_store
from tests.attachments.documents import pdf_bytes, scanned_pdf

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def enqueued(monkeypatch):
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda name, args: None)


@pytest.fixture
def extract(say):
    def extract(name, data):
        return attachment_process(attachment_store(message=say(), name=name, data=data).pk)

    return extract


def test_a_scanned_page_is_read_by_ocr_and_marked_machine_read(extract, settings):
    settings.ATTACHMENTS_OCR = True
    data = scanned_pdf([["Restart the billing queue", "Invoice number 48213"]])
    done = extract("scan.pdf", data)
    assert done.state == "ready", done.failure
    assert done.page_count == 1
    text = done.extracted_text
    assert "Restart the billing queue" in text, text
    assert "48213" in text, text
    assert text.index("Restart") < text.index("48213")  # top line first
    assert done.note.startswith("Page 1 was read by OCR (machine-read"), done.note


def test_ocr_reads_at_most_the_page_cap_and_names_the_rest(extract, settings):
    settings.ATTACHMENTS_OCR = True
    settings.ATTACHMENTS_OCR_MAX_PAGES = 1
    data = scanned_pdf([["Alpha page holds words"], ["Second page never read"]])
    done = extract("two.pdf", data)
    assert done.state == "ready", done.failure
    first, second = done.extracted_text.split(PAGE_BREAK)
    assert "Alpha page" in first
    assert second == ""
    assert "Page 1 was read by OCR" in done.note
    assert (
        "Page 2 is a scanned image without a text layer: its text was not read (OCR "
        "reads at most 1 page a file)." in done.note
    ), done.note


def test_with_ocr_off_scanned_pages_are_only_reported(extract, settings):
    settings.ATTACHMENTS_OCR = False
    done = extract("contract.pdf", pdf_bytes([["Cover letter"], None, None]))
    assert done.state == "ready"
    assert done.extracted_text.split(PAGE_BREAK) == ["Cover letter", "", ""]
    assert done.note == (
        "Pages 2–3 are scanned images without a text layer: their text was not read "
        "(OCR is off on this hub)."
    )


def test_ocr_is_off_by_default_with_a_cap_and_off_for_images():
    # Off by default: OCR peaks at ~600-750 MB, over the 300 MB stated for an extraction.
    assert django_settings.ATTACHMENTS_OCR is False
    assert django_settings.ATTACHMENTS_OCR_MAX_PAGES == 20
    assert django_settings.ATTACHMENTS_OCR_IMAGES is False


LOAD_THE_HUB = """
import sys
import django
django.setup()
from django.urls import resolve
import hermes_site.urls, attachments.services, attachments.extraction.processor
import attachments.extraction.runner, attachments.tasks
from django.test import Client
Client().get("/")
print(sorted(m for m in ("rapidocr_onnxruntime", "cv2", "onnxruntime") if m in sys.modules))
"""


def test_the_web_process_never_loads_the_ocr_engine(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": "x",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": "redis://127.0.0.1:6379/15",
        "LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "LLM_MODEL": "gpt-4o-mini",
        "HERMES_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "hermes_site.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", LOAD_THE_HUB],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_ocr_over_its_memory_bound_fails_the_file_with_that_reason(extract, settings):
    settings.ATTACHMENTS_OCR = True
    settings.ATTACHMENTS_OCR_MEMORY_MB = 600  # below what the engine maps: it cannot load
    done = extract("scan.pdf", scanned_pdf([["Too big to read here"]]))
    assert done.state == "failed"
    assert done.failure.startswith(
        "Reading the scanned pages by OCR needed more than 600 MB of memory"
    ), done.failure
    settings.ATTACHMENTS_OCR = False
    again = extract("runbook.pdf", pdf_bytes([["the worker still reads"]]))
    assert again.extracted_text == "the worker still reads"


# --- the text in images --------------------------------------------------------------------


def text_png(lines, size=(900, 300)) -> bytes:
    import io

    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    try:
        font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 40)
    except OSError:
        font = ImageFont.load_default(size=40)
    for row, line in enumerate(lines):
        draw.text((40, 40 + row * 90), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def test_an_images_text_is_read_when_the_model_cannot_see_it(extract, settings):
    settings.ATTACHMENTS_OCR = settings.ATTACHMENTS_OCR_IMAGES = True
    settings.VISION_LLM_MODEL = ""
    settings.LLM_VISION = "off"
    done = extract("error.png", text_png(["ERROR 503 upstream timeout", "retry in 30s"]))
    assert done.state == "ready", done.failure
    assert "ERROR 503 upstream timeout" in done.extracted_text, done.extracted_text
    assert done.note.startswith("The text was read from the image by OCR (machine-read")


@pytest.mark.parametrize(
    "setting",
    [
        {"ATTACHMENTS_OCR": False},
        {"ATTACHMENTS_OCR_IMAGES": False},
        {"LLM_VISION": "on", "LLM_PROVIDER": "openai", "LLM_BASE_URL": "http://127.0.0.1:9/v1"},
        {"VISION_LLM_MODEL": "eyes"},
    ],
)
def test_no_ocr_for_images_the_model_sees_or_with_ocr_off(say, settings, setting):
    settings.ATTACHMENTS_OCR = settings.ATTACHMENTS_OCR_IMAGES = True
    settings.VISION_LLM_MODEL = ""
    settings.LLM_VISION = "off"
    for name, value in setting.items():
        setattr(settings, name, value)
    stored = attachment_store(message=say(), name="shot.png", data=text_png(["hello"]))
    if "VISION_LLM_MODEL" in setting:  # the vision model describes it instead
        assert stored.state == "pending"
    else:
        assert stored.state == "ready" and stored.extracted_text == ""


def test_a_huge_image_is_refused_before_decoding(extract, settings):
    import io

    from PIL import Image

    settings.ATTACHMENTS_OCR = settings.ATTACHMENTS_OCR_IMAGES = True
    settings.VISION_LLM_MODEL = ""
    settings.LLM_VISION = "off"
    out = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(out, format="PNG")  # 400 megapixels, a small file
    done = extract("bomb.png", out.getvalue())
    assert done.state == "failed"
    assert "20,000 × 20,000 pixels" in done.failure


def test_without_the_engines_libraries_scanned_pages_are_reported_not_failed(monkeypatch, tmp_path):
    """OpenCV's wheel loads libGL.so.1 from the system: without it the PDF is still read and
    the scanned page named (read_pdf in this process, the engine's import refused)."""
    import time

    from attachments.extraction.ocr import OcrReader
    from attachments.extraction.pages import PageSink
    from attachments.extraction.pdf import read_pdf

    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)  # its import fails
    path = tmp_path / "scan.pdf"
    path.write_bytes(scanned_pdf([["never read"]]))
    ocr = OcrReader(max_pages=5, deadline=time.monotonic() + 60)
    done = read_pdf(str(path), PageSink(10_000), max_pages=10, ocr=ocr)
    assert done.text == ""
    assert done.notes == [
        "Page 1 is a scanned image without a text layer: its text was not read (OCR could not "
        "start on this hub)."
    ]
