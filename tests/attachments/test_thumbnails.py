"""Images in the dashboard: thumbnails and the inline view, for readers only, allow-listed
raster types only, bombs refused from the header, always re-encoded; the room's HTML."""

import io
import struct
import zlib

import pytest
from django.test import Client
from PIL import Image

from attachments.models import Attachment, attachment_storage
from attachments.services import attachment_store, blobs_sweep
from attachments.thumbnails import THUMBNAIL_SIDE, thumbnail_name
from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from tests.chats.dashboard_helpers import page_url

pytestmark = pytest.mark.django_db


def login(person) -> Client:
    client = Client()
    client.force_login(person)
    return client


def image_bytes(fmt: str, size=(1200, 800), mode="RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, (200, 30, 30) if mode == "RGB" else (200, 30, 30, 128)).save(
        out, format=fmt
    )
    return out.getvalue()


def bomb_png(width=20_000, height=20_000) -> bytes:
    """A PNG whose header claims 400 megapixels, in a few dozen bytes (never decodable)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def store(say, name, data) -> Attachment:
    return attachment_store(message=say(), name=name, data=data)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_a_reader_gets_a_bounded_webp_thumbnail(say, member, fmt):
    attachment = store(say, f"photo.{fmt.lower()}", image_bytes(fmt))
    response = login(member).get(f"/attachments/{attachment.pk}/thumbnail")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/webp"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"].startswith("sandbox")
    thumbnail = Image.open(io.BytesIO(response.content))
    assert thumbnail.format == "WEBP" and max(thumbnail.size) == THUMBNAIL_SIDE
    assert thumbnail.size[0] > thumbnail.size[1]  # the aspect ratio is kept
    # Made once, kept beside the blob.
    assert attachment_storage().exists(thumbnail_name(attachment.sha256))


def test_transparency_is_kept(say, member):
    attachment = store(say, "icon.png", image_bytes("PNG", (64, 64), mode="RGBA"))
    response = login(member).get(f"/attachments/{attachment.pk}/thumbnail")
    assert Image.open(io.BytesIO(response.content)).mode == "RGBA"


def test_outsiders_and_other_chats_members_get_404(say, outsider, make_person):
    attachment = store(say, "photo.png", image_bytes("PNG"))
    stranger = make_person("sam")
    other, _ = chat_get_or_create(channel="web", chat_id="elsewhere", title="Elsewhere")
    chat_member_ensure(chat=other, person=stranger, role=ChatMember.Role.OWNER)
    for person in (outsider, stranger):
        client = login(person)
        for view in ("thumbnail", "view", "download"):
            assert client.get(f"/attachments/{attachment.pk}/{view}").status_code == 404
    assert Client().get(f"/attachments/{attachment.pk}/thumbnail").status_code == 302  # log in


def test_svg_and_html_never_render_inline(say, member):
    svg = store(
        say, "logo.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>1</script></svg>'
    )
    html = store(say, "page.png", b"<!doctype html><html><script>alert(1)</script></html>")
    client = login(member)
    for attachment in (svg, html):
        assert attachment.media_type in ("image/svg+xml", "text/html")
        assert client.get(f"/attachments/{attachment.pk}/thumbnail").status_code == 404
        assert client.get(f"/attachments/{attachment.pk}/view").status_code == 404
        download = client.get(f"/attachments/{attachment.pk}/download")
        assert download["Content-Type"] == "application/octet-stream"


@pytest.mark.parametrize("side", [20_000, 6_000])
def test_a_decompression_bomb_is_refused_from_its_header(say, member, side):
    """400 megapixels (past Pillow's own bound) and 36 (past the thumbnails' bound): both
    refused before a pixel is decoded, said in words, nothing kept."""
    attachment = store(say, "bomb.png", bomb_png(side, side))
    assert attachment.media_type == "image/png"
    response = login(member).get(f"/attachments/{attachment.pk}/thumbnail")
    assert response.status_code == 422
    assert "too large to preview" in response.content.decode()
    assert "at most 25 megapixels" in response.content.decode()
    assert not attachment_storage().exists(thumbnail_name(attachment.sha256))


def test_a_broken_image_gets_no_thumbnail_and_a_reason(say, member):
    attachment = store(say, "cut.png", image_bytes("PNG")[:60])
    response = login(member).get(f"/attachments/{attachment.pk}/thumbnail")
    assert response.status_code == 422
    assert "could not be read" in response.content.decode()


def test_a_polyglot_thumbnail_is_re_encoded(say, member):
    polyglot = image_bytes("PNG", (40, 40)) + b"<html><script>alert(1)</script></html>"
    attachment = store(say, "both.png", polyglot)
    assert attachment.media_type == "image/png"
    client = login(member)
    thumbnail = client.get(f"/attachments/{attachment.pk}/thumbnail").content
    assert thumbnail[:4] == b"RIFF" and b"<script" not in thumbnail
    view = client.get(f"/attachments/{attachment.pk}/view")
    assert view["Content-Type"] == "image/png" and view["X-Content-Type-Options"] == "nosniff"
    assert view["Content-Security-Policy"].startswith("sandbox")
    assert view["Content-Disposition"].startswith("inline;")


def test_the_room_shows_thumbnails_and_cards_with_name_size_and_type(say, member, team_chat):
    photo = store(say, "screen.png", image_bytes("PNG"))
    pdf = attachment_store(
        message=photo.message,
        name="运行手册.pdf",
        data=b"%PDF-1.4\n%\xe2\xe3\n1 0 obj\n<<>>\nendobj\n",
    )
    empty = attachment_store(message=photo.message, name="empty.txt", data=b"")
    page = login(member).get(page_url(team_chat)).content.decode()
    assert f'src="/attachments/{photo.pk}/thumbnail"' in page
    assert f'href="/attachments/{pdf.pk}/download"' in page and "运行手册.pdf" in page
    assert pdf.media_type == "application/pdf" and ">PDF<" in page
    assert f'src="/attachments/{pdf.pk}/thumbnail"' not in page
    assert "The file is empty (0 bytes)." in page  # failed, with its reason
    assert f'href="/attachments/{empty.pk}/download"' not in page


def test_a_pending_file_says_so(say, member, team_chat):
    attachment = store(say, "notes.txt", b"words")
    Attachment.objects.filter(pk=attachment.pk).update(state=Attachment.State.PENDING)
    page = login(member).get(page_url(team_chat)).content.decode()
    assert "processing…" in page


def test_the_sweep_deletes_a_thumbnail_with_its_blob(say, member):
    from datetime import timedelta

    from django.utils import timezone

    attachment = store(say, "photo.png", image_bytes("PNG"))
    login(member).get(f"/attachments/{attachment.pk}/thumbnail")
    name = thumbnail_name(attachment.sha256)
    assert attachment_storage().exists(name)
    attachment.message.delete()
    assert blobs_sweep(now=timezone.now() + timedelta(hours=2)) == 1
    assert not attachment_storage().exists(name)


def test_thumbnails_and_views_are_not_kept_by_the_browser(say, member):
    attachment = store(say, "photo.png", image_bytes("PNG"))
    client = login(member)
    for view in ("thumbnail", "view"):
        response = client.get(f"/attachments/{attachment.pk}/{view}")
        assert response["Cache-Control"] == "private, no-store"
