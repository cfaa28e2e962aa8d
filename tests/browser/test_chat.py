"""A person and a teammate in one web room, in real browsers, with the real stack."""

import os

from playwright.sync_api import expect

from tests.browser.conftest import composer_fill
from tests.fakes import openai_server as fake_openai


def test_create_a_room_send_a_message_and_see_the_reply_stream_in(
    page_for, make_person, fake_llm, tmp_path
):
    alice, bob = make_person("alice"), make_person("bob")
    fake_llm.script(fake_openai.text("Deploys are on Tuesdays, after the standup.", delay=0.1))
    page = page_for(alice)
    page.fill("#room-title", "Ops room")
    page.click("button:text-is('New room')")
    expect(page.locator("h1")).to_have_text("Ops room")
    page.fill("#member-username", "bob")
    page.click("#members button:text('Add')")
    expect(page.locator("#members")).to_contain_text("bob")

    teammate = page_for(bob)
    teammate.click("text=Ops room")
    expect(teammate.locator("h1")).to_have_text("Ops room")

    composer_fill(page, "When do we deploy?")
    page.keyboard.press("Enter")
    expect(page.locator("#messages")).to_contain_text("When do we deploy?")
    expect(page.locator("#messages")).to_contain_text(
        "Deploys are on Tuesdays, after the standup.", timeout=20_000
    )
    # The teammate's page shows both messages live, each once.
    expect(teammate.locator("#messages")).to_contain_text("When do we deploy?", timeout=10_000)
    expect(teammate.locator("#messages")).to_contain_text(
        "Deploys are on Tuesdays, after the standup.", timeout=20_000
    )
    expect(teammate.locator("article.message-user")).to_have_count(1)
    expect(teammate.locator("article.message-assistant")).to_have_count(1)
    page.screenshot(path=str(tmp_path / "chat.png"), full_page=True)
    if os.environ.get("HERMES_SCREENSHOTS"):
        page.screenshot(path=os.environ["HERMES_SCREENSHOTS"] + "/chat.png", full_page=True)


def test_markup_in_messages_renders_inert(page_for, make_person, fake_llm):
    alice = make_person("alice")
    fake_llm.script(fake_openai.text("noted"))
    page = page_for(alice)
    page.fill("#room-title", "Safety")
    page.click("button:text-is('New room')")
    page.evaluate("window.__pwned = false")
    composer_fill(
        page,
        '<script>window.__pwned = true</script> <img src=x onerror="window.__pwned = true">',
    )
    page.keyboard.press("Enter")
    expect(page.locator("#messages")).to_contain_text("<script>window.__pwned = true</script>")
    expect(page.locator("#messages")).to_contain_text("noted", timeout=20_000)
    assert page.evaluate("window.__pwned") is False
    assert page.locator("#messages img").count() == 0
