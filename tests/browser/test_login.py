"""The first thing a person does: log in and see their chats."""

import os

from playwright.sync_api import expect

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure


def test_log_in_and_see_only_my_chats(page_for, make_person, settings, tmp_path):
    alice, bob = make_person("alice"), make_person("bob")
    mine, _ = chat_get_or_create(channel="web", chat_id="r1", title="Alice's room")
    theirs, _ = chat_get_or_create(channel="web", chat_id="r2", title="Bob's room")
    chat_member_ensure(chat=mine, person=alice, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=theirs, person=bob, role=ChatMember.Role.OWNER)

    page = page_for(alice)
    expect(page.locator("h1")).to_have_text("Chats")
    expect(page.get_by_text("Alice's room")).to_be_visible()
    expect(page.get_by_text("Bob's room")).to_have_count(0)
    # htmx is served locally from the npm build, never a CDN.
    assert page.evaluate("typeof window.htmx") == "object"
    page.screenshot(path=str(tmp_path / "chat-list.png"))
    if os.environ.get("HERMES_SCREENSHOTS"):  # docs/screenshots/ is made this way
        page.screenshot(path=os.environ["HERMES_SCREENSHOTS"] + "/chat-list.png")
