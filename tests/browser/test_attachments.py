"""Files in the dashboard, in Chromium against the real processes: attach by the button, by
drag and drop and by paste, see the chips and the upload's progress, send; another person's
browser shows the thumbnail live and downloads the exact bytes under their Chinese name; an
outsider's browser gets 404 for the same URL. The page trips no Content-Security-Policy."""

import base64
import io
import json
import os

import pytest
from PIL import Image
from playwright.sync_api import expect

from attachments.models import Attachment
from chats.models import ChatMember, Message
from chats.services import chat_get_or_create, chat_member_ensure
from tests.browser.conftest import composer_fill
from tests.browser.test_security import watch_policy
from tests.fakes import openai_server as fake_openai


@pytest.fixture
def blobs_folder(tmp_path, monkeypatch, settings):
    """The blobs of this test, for the test process and the live stack's (set before it)."""
    folder = tmp_path / "blobs"
    folder.mkdir()
    monkeypatch.setenv("ATTACHMENTS_STORAGE_OPTIONS", json.dumps({"location": str(folder)}))
    settings.STORAGES = {
        **settings.STORAGES,
        "attachments": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(folder)},
        },
    }
    return folder


def png(size=(640, 360), color=(30, 120, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def open_room(page, chat):
    page.goto(f"/chats/{chat.chat_key}/")
    expect(page.locator("h1")).to_have_text(chat.title)


# A file added the way the page receives it from the desktop or the clipboard: a DataTransfer
# holding a File, in a synthetic drop (on the chat) or paste (in the text box) event.
DISPATCH = """([kind, name, type, b64]) => {
    const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    const transfer = new DataTransfer();
    transfer.items.add(new File([bytes], name, { type }));
    if (kind === "drop") {
        const zone = document.getElementById("chat");
        const init = { dataTransfer: transfer, bubbles: true, cancelable: true };
        zone.dispatchEvent(new DragEvent("dragover", init));
        zone.dispatchEvent(new DragEvent("drop", init));
    } else {
        const box = document.getElementById("composer-text");
        box.dispatchEvent(new ClipboardEvent("paste", {
            clipboardData: transfer, bubbles: true, cancelable: true,
        }));
    }
}"""

# Every value the upload's progress bar takes (set as a property, reflected as an attribute).
WATCH_PROGRESS = """() => {
    window.progressSeen = [];
    const bar = document.getElementById("upload-progress");
    new MutationObserver(() => window.progressSeen.push(Number(bar.value)))
        .observe(bar, { attributes: true, attributeFilter: ["value"] });
}"""


def add_by(page, kind, name, media_type, data: bytes):
    page.evaluate(DISPATCH, [kind, name, media_type, base64.b64encode(data).decode()])


def test_files_go_up_with_progress_and_come_down_live_intact(
    blobs_folder, page_for, make_person, fake_llm
):
    alice, bob, oscar = make_person("alice"), make_person("bob"), make_person("oscar")
    room, _ = chat_get_or_create(channel="web", chat_id="files-room", title="Files room")
    chat_member_ensure(chat=room, person=alice, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=room, person=bob)
    fake_llm.script(fake_openai.text("I have your files."))
    screenshot = png()
    pasted = png((300, 300), (240, 180, 20))
    # A PDF-ish file of a few megabytes: large enough that the upload reports progress.
    report = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n" + os.urandom(3 * 1024 * 1024)
    notes = "运维笔记\nline two\n".encode()

    bob_page = page_for(bob)
    open_room(bob_page, room)
    alice_page = page_for(alice)
    violations = watch_policy(alice_page)
    open_room(alice_page, room)

    alice_page.set_input_files(
        "#composer-file-input",
        files=[
            {"name": "screen.png", "mimeType": "image/png", "buffer": screenshot},
            {"name": "季度报告.pdf", "mimeType": "application/pdf", "buffer": report},
        ],
    )
    add_by(alice_page, "drop", "运维笔记.txt", "text/plain", notes)
    add_by(alice_page, "paste", "image.png", "image/png", pasted)
    add_by(alice_page, "drop", "unwanted.txt", "text/plain", b"not this one")
    chips = alice_page.locator("#file-chips .file-chip")
    expect(chips).to_have_count(5)
    expect(chips.nth(1)).to_contain_text("季度报告.pdf")
    expect(chips.nth(1)).to_contain_text("3.0 MB")
    alice_page.click("button[aria-label='Remove unwanted.txt']")
    expect(chips).to_have_count(4)

    alice_page.evaluate(WATCH_PROGRESS)
    composer_fill(alice_page, "the files from today")
    alice_page.keyboard.press("Enter")

    mine = alice_page.locator("article.message-user")
    expect(mine).to_contain_text("the files from today", timeout=30_000)
    expect(mine.locator(".file")).to_have_count(4)
    expect(chips).to_have_count(0)  # sent: the composer is empty again
    assert max(alice_page.evaluate("window.progressSeen")) == 100

    # Bob's page receives it live, with both thumbnails loaded and the cards.
    theirs = bob_page.locator("article.message-user")
    expect(theirs).to_contain_text("the files from today", timeout=30_000)
    thumbnails = theirs.locator(".file-image img")
    expect(thumbnails).to_have_count(2)
    # Each file that settles replaces the message on the page (message.updated): handle its
    # images once every file has settled, not while the message may still be swapped.
    expect(theirs.locator(".label-pending")).to_have_count(0, timeout=60_000)
    for index in range(2):
        thumbnails.nth(index).scroll_into_view_if_needed()
        expect(thumbnails.nth(index)).to_have_js_property("complete", True)
        assert thumbnails.nth(index).evaluate("img => img.naturalWidth") > 0
    expect(theirs.locator(".file", has_text="季度报告.pdf")).to_contain_text("PDF")
    expect(bob_page.locator("article.message-assistant")).to_contain_text(
        "I have your files.", timeout=30_000
    )

    message = Message.objects.get(role="user")
    assert sorted(a.name for a in message.attachments.all()) == sorted(
        ["screen.png", "季度报告.pdf", "运维笔记.txt", "image.png"]
    )

    # Bob downloads the report: the exact bytes, the Chinese name intact.
    with bob_page.expect_download() as info:
        theirs.locator("a.file-name", has_text="季度报告.pdf").click()
    download = info.value
    assert download.suggested_filename == "季度报告.pdf"
    with open(download.path(), "rb") as saved:
        assert saved.read() == report

    # An outsider's browser: the same URLs are 404.
    attachment = Attachment.objects.get(name="季度报告.pdf")
    oscar_page = page_for(oscar)
    for view in ("download", "thumbnail", "view"):
        assert oscar_page.request.get(f"/attachments/{attachment.pk}/{view}").status == 404
    assert violations == []


@pytest.fixture
def small_limits(monkeypatch):
    """Files of at most 4 KB, 6 KB per chat a day: set before the live stack starts."""
    monkeypatch.setenv("ATTACHMENTS_MAX_FILE_BYTES", "4096")
    monkeypatch.setenv("ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY", "6000")


def test_files_over_a_limit_are_refused_with_the_reason_and_the_message_kept(
    small_limits, blobs_folder, page_for, make_person, fake_llm
):
    alice = make_person("alice")
    room, _ = chat_get_or_create(channel="web", chat_id="limits-room", title="Limits room")
    chat_member_ensure(chat=room, person=alice, role=ChatMember.Role.OWNER)
    fake_llm.script(fake_openai.text("Noted."))
    page = page_for(alice)
    open_room(page, room)
    page.set_input_files(
        "#composer-file-input",
        files=[
            {"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"x" * 5000},
            {"name": "a.bin", "mimeType": "application/octet-stream", "buffer": b"a" * 3000},
            {"name": "b.bin", "mimeType": "application/octet-stream", "buffer": b"b" * 3500},
        ],
    )
    # Over the file limit: marked on its chip before anything is sent.
    expect(page.locator(".file-chip.is-too-large")).to_contain_text("big.bin")
    expect(page.locator(".file-chip.is-too-large")).to_contain_text("not sent")
    composer_fill(page, "three files")
    page.keyboard.press("Enter")
    mine = page.locator("article.message-user")
    expect(mine).to_contain_text("three files", timeout=30_000)
    expect(mine.locator(".file")).to_have_count(1)
    expect(mine.locator(".file")).to_contain_text("a.bin")
    error = page.locator("#composer-error")
    # The server's reason for b.bin (the chat's day) and the page's for big.bin.
    expect(error).to_contain_text("b.bin")
    expect(error).to_contain_text("last 24 hours")
    expect(error).to_contain_text("big.bin: larger than 4.0 KB, not sent")
    message = Message.objects.get(role="user")
    assert message.text == "three files"
    assert [a.name for a in message.attachments.all()] == ["a.bin"]
