"""What a file is comes from its bytes, never from its name or the sender's claim."""

import io
import zipfile

from attachments.sniffing import kind_for, sniff_media_type
from tests.attachments.conftest import png_bytes


def test_a_png_is_an_image_whatever_it_is_called():
    assert sniff_media_type(png_bytes()) == "image/png"
    assert kind_for("image/png") == "image"


def test_plain_text_is_text_and_a_document():
    assert sniff_media_type("just words, 中文 too\n".encode()) == "text/plain"
    assert kind_for("text/plain") == "document"


def test_a_pdf_signature_is_a_pdf():
    assert sniff_media_type(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n") == "application/pdf"


def test_html_and_svg_are_recognised_as_active_content():
    assert sniff_media_type(b"<!DOCTYPE html><html><script>x()</script>") == "text/html"
    assert sniff_media_type(b'<?xml version="1.0"?>\n<svg xmlns="x"></svg>') == "image/svg+xml"
    assert kind_for("image/svg+xml") == "other"


def test_a_docx_is_recognised_inside_its_zip():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:document/>")
    media_type = sniff_media_type(buffer.getvalue())
    assert media_type == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    assert kind_for(media_type) == "document"


def test_binary_noise_is_an_octet_stream():
    assert sniff_media_type(bytes(range(256)) * 4) == "application/octet-stream"
    assert sniff_media_type(b"") == "application/octet-stream"


def test_a_multibyte_character_cut_by_the_sample_is_still_text():
    data = ("a" * 8191 + "中").encode() + b"more"
    assert sniff_media_type(data) == "text/plain"
