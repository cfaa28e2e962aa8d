"""Team knowledge in Chromium against the real processes (daphne + Celery worker on the
test database, the fake model over HTTP): a maintainer uploads a whole folder into a
collection and watches its sync state turn completed, each file with its state; turns it on
in a room from the chat's Knowledge page; a reader asks there, the model searches and cites
the passage, and the citation in the reply opens the document viewer with that passage
highlighted. An outsider's browser gets 404 for the same link. No page trips the Content
Security Policy."""

import json

import pytest
from playwright.sync_api import expect

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from knowledge.models import Document, Passage
from knowledge.services import collection_create
from tests.browser.conftest import composer_fill
from tests.browser.test_security import watch_policy
from tests.fakes import openai_server as fake_openai

pytestmark = pytest.mark.timeout(300)

RUNBOOK = """# On-call runbook

## Full disk
When a disk is full, remove rotated logs under /var/log and expand the volume.

## Certificates
Renew TLS certificates with certbot renew.
"""


def cite_first_passage(body: dict):
    content = next(m["content"] for m in body["messages"] if m.get("tool_call_id") == "k1")
    first = json.loads(content)["passages"][0]
    return fake_openai.text(f"Remove rotated logs under /var/log [{first['ref']}].")


def test_upload_a_folder_see_the_sync_and_open_a_citation(
    page_for, make_person, fake_llm, tmp_path
):
    olivia, marco, oscar = make_person("olivia"), make_person("marco"), make_person("oscar")
    collection = collection_create(name="Runbooks", by=olivia, readers=[marco])
    room, _ = chat_get_or_create(channel="web", chat_id="ops-room", title="Ops room")
    chat_member_ensure(chat=room, person=olivia, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=room, person=marco)
    folder = tmp_path / "runbooks"
    (folder / "oncall").mkdir(parents=True)
    (folder / "oncall" / "disk.md").write_text(RUNBOOK)
    (folder / "notes.txt").write_text("Deploys happen on Tuesdays.\n")
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 16)

    page = page_for(olivia)
    violations = watch_policy(page)
    page.goto(f"/knowledge/{collection.pk}/")
    expect(page.locator("h1")).to_have_text("Runbooks")
    page.set_input_files("#upload-folder", str(folder))
    page.click("#upload-form button[type=submit]")
    expect(page.locator(".notice")).to_contain_text("3 files received")
    # The worker reads and indexes them; the page shows the run's state when reloaded.
    for _ in range(120):
        if page.locator("#syncs li[data-state=completed]").count():
            break
        page.wait_for_timeout(1000)
        page.reload()
    expect(page.locator("#syncs li").first).to_have_attribute("data-state", "completed")
    expect(page.locator("#syncs li").first).to_contain_text("2 added")
    documents = page.locator("#documents tbody tr")
    expect(documents).to_have_count(3)
    expect(page.locator("#documents tr", has_text="runbooks/oncall/disk.md")).to_have_attribute(
        "data-state", "ready"
    )
    expect(page.locator("#documents tr", has_text="runbooks/blob.bin")).to_have_attribute(
        "data-state", "failed"
    )

    # On in the room, from the chat's Knowledge page.
    page.goto(f"/chats/{room.chat_key}/knowledge")
    page.click(f"#chat-collection-{collection.pk} button")
    expect(page.locator(f"#chat-collection-{collection.pk}")).to_have_attribute("data-on", "1")

    # Marco asks; the model searches, then cites what it found.
    fake_llm.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        cite_first_passage,
    )
    asker = page_for(marco)
    violations += watch_policy(asker)
    asker.goto(f"/chats/{room.chat_key}/")
    composer_fill(asker, "what does the runbook say about a full disk?")
    asker.keyboard.press("Enter")
    citation = asker.locator("article.message-assistant a.citation")
    expect(citation).to_contain_text("runbooks/oncall/disk.md § On-call runbook › Full disk",
                                     timeout=60_000)  # fmt: skip
    href = citation.get_attribute("href")
    passage = Passage.objects.get(document__path="runbooks/oncall/disk.md", ordinal=0)
    assert href.endswith(f"#K{passage.pk}")
    citation.click()
    cited = asker.locator(f"#K{passage.pk}")
    expect(cited).to_have_class("passage is-cited")
    expect(cited).to_contain_text("remove rotated logs")
    expect(cited).to_be_in_viewport()

    stranger = page_for(oscar)
    response = stranger.goto(href)
    assert response.status == 404
    assert Document.objects.filter(collection=collection).count() == 3
    assert violations == []
