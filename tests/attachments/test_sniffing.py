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


def test_a_webm_with_only_audio_is_audio_and_one_with_video_stays_video():
    """A browser's voice recording (MediaRecorder's WebM/Opus) is audio, not a video."""
    import io

    import av
    import numpy as np

    from attachments.sniffing import kind_for, sniff_media_type, webm_audio_only
    from tests.attachments.audio import speech_webm_opus

    recording = speech_webm_opus("hello")
    assert sniff_media_type(recording) == "audio/webm" and kind_for("audio/webm") == "audio"
    out = io.BytesIO()
    with av.open(out, "w", format="webm") as container:
        stream = container.add_stream("libvpx", rate=10)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), dtype=np.uint8), format="rgb24")
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    assert sniff_media_type(out.getvalue()) == "video/webm"
    # Cut short before its track list, or not a WebM at all: never called audio.
    assert not webm_audio_only(recording[:20]) and not webm_audio_only(b"\x1a\x45\xdf\xa3\xff")
