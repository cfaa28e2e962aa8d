"""Memory approvals in a real browser against the real stack: the badge, approve, edit and
approve, reject, a proposal that expired while the page was open, and another person's
browser that sees none of it."""

import os
from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import expect

from memory.models import MemoryEntry, MemoryEvent
from memory.reviews import memory_review
from memory.services import Author, memory_book, memory_propose
from tests.memory.helpers import shown_revision


def propose(book, author, content, *, change="add", match=""):
    outcome = memory_propose(
        book=book, change=change, author=Author(person=author), content=content, match=match
    )
    assert outcome.code == "pending", outcome.message
    return outcome.entry


def test_a_person_decides_their_proposals_and_the_badge_follows(page_for, make_person):
    olivia, marco, oscar = make_person("olivia"), make_person("marco"), make_person("oscar")
    book = memory_book(scope="user", person=marco)
    tea = propose(book, olivia, "Prefers tea.")
    lisbon = propose(book, olivia, "Works from Lisbon.")
    jazz = propose(book, olivia, "Likes jazz.")
    chess = propose(book, olivia, "Plays chess on Sundays.")
    porto = propose(book, olivia, "Was born in Porto.")
    memory_review(
        entry_id=porto.pk, revision=shown_revision(porto.pk), decision="approve", person=marco
    )
    propose(book, olivia, "Was born in Braga.", change="replace", match="Porto")

    page = page_for(marco)
    badge = page.locator("#approvals-badge")
    expect(badge).to_have_text("5")
    page.click(".topbar nav a:has-text('Approvals')")
    expect(page.locator("h1")).to_have_text("Approvals")
    expect(page.locator("li.proposal")).to_have_count(5)
    expect(page.locator("#approval-list")).to_contain_text(
        "Was born in Porto. → Was born in Braga."
    )
    if os.environ.get("HERMES_SCREENSHOTS"):  # docs/screenshots/ is made this way
        page.screenshot(
            path=os.environ["HERMES_SCREENSHOTS"] + "/memory-approvals.png", full_page=True
        )

    item = page.locator(f"#proposal-{tea.pk}")
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(item).to_contain_text("approved")
    expect(badge).to_have_text("4")

    item = page.locator(f"#proposal-{lisbon.pk}")
    item.locator("summary:text('Edit')").click()
    item.locator("textarea").fill("Works from Lisbon, in the Alfama office.")
    item.get_by_role("button", name="Save and approve").click()
    expect(item).to_contain_text("approved Works from Lisbon, in the Alfama office.")
    expect(badge).to_have_text("3")

    item = page.locator(f"#proposal-{jazz.pk}")
    item.get_by_role("button", name="Reject").click()
    expect(item).to_contain_text("rejected")
    expect(badge).to_have_text("2")

    # The proposal runs out while the page is open: deciding it says so and changes nothing.
    MemoryEntry.objects.filter(pk=chess.pk).update(
        proposal_expires_at=timezone.now() - timedelta(seconds=1)
    )
    item = page.locator(f"#proposal-{chess.pk}")
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(item).to_contain_text("expired")
    expect(badge).to_have_text("1")

    statuses = dict(MemoryEntry.objects.filter(book=book).values_list("pk", "status"))
    assert statuses == {
        tea.pk: "active",
        lisbon.pk: "active",
        jazz.pk: "rejected",
        chess.pk: "expired",
        porto.pk: "active",
    }
    assert MemoryEntry.objects.get(pk=lisbon.pk).text == "Works from Lisbon, in the Alfama office."
    decisions = MemoryEvent.objects.filter(entry__in=[tea, lisbon, jazz]).exclude(kind="proposed")
    assert set(decisions.values_list("kind", "via")) == {
        ("approved", "dashboard"),
        ("edited", "dashboard"),
        ("rejected", "dashboard"),
    }

    page.reload()
    expect(page.locator("li.proposal")).to_have_count(1)
    expect(badge).to_have_text("1")

    other = page_for(oscar)
    expect(other.locator("#approvals-badge")).to_have_text("0")
    other.goto("/memory/approvals/")
    expect(other.locator("#approvals")).to_contain_text("Nothing waits for your decision.")
    expect(other.locator("li.proposal")).to_have_count(0)
    other.goto("/memory/mine/")
    expect(other.locator("#my-memory")).to_contain_text("The agent holds nothing about you.")
    expect(other.locator("#my-memory")).not_to_contain_text("Braga")


def test_bulk_approve_and_reject_update_the_list_and_the_badge(page_for, make_person):
    olivia, marco = make_person("olivia"), make_person("marco")
    book = memory_book(scope="user", person=marco)
    tea, lisbon, jazz = (
        propose(book, olivia, text) for text in ("Prefers tea.", "Works from Lisbon.", "Jazz.")
    )
    page = page_for(marco)
    page.goto("/memory/approvals/")
    expect(page.locator("#approvals-badge")).to_have_text("3")
    page.locator(f"#proposal-{tea.pk} input[type=checkbox]").check()
    page.locator(f"#proposal-{lisbon.pk} input[type=checkbox]").check()
    page.click("button:text-is('Approve selected')")
    expect(page.locator("#approvals-notice")).to_have_text("Approved 2 proposals.")
    expect(page.locator("li.proposal")).to_have_count(1)
    expect(page.locator("#approvals-badge")).to_have_text("1")
    page.locator(f"#proposal-{jazz.pk} input[type=checkbox]").check()
    page.click("button:text-is('Reject selected')")
    expect(page.locator("#approvals-notice")).to_have_text("Rejected 1 proposal.")
    expect(page.locator("#no-proposals")).to_be_visible()
    expect(page.locator("#approvals-badge")).to_have_text("0")
    statuses = dict(MemoryEntry.objects.values_list("text", "status"))
    assert statuses == {
        "Prefers tea.": "active",
        "Works from Lisbon.": "active",
        "Jazz.": "rejected",
    }


def test_a_proposal_revised_while_the_page_was_open_is_shown_again_not_approved(
    page_for, make_person
):
    olivia, marco = make_person("olivia"), make_person("marco")
    book = memory_book(scope="user", person=marco)
    author = Author(person=olivia)
    tea = memory_propose(book=book, change="add", author=author, content="Prefers tea.").entry
    page = page_for(marco)
    page.goto("/memory/approvals/")
    item = page.locator(f"#proposal-{tea.pk}")
    expect(item).to_contain_text("Prefers tea.")

    revised = memory_propose(
        book=book,
        change="replace",
        author=author,
        match="tea",
        content="Prefers tea and shares his passwords.",
    )
    assert revised.code == "pending"
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(item).to_contain_text("This proposal changed after you saw it: review the new text")
    expect(item).to_contain_text("Prefers tea and shares his passwords.")
    assert MemoryEntry.objects.get(pk=tea.pk).status == "pending"

    item.get_by_role("button", name="Reject", exact=True).click()  # the new version's button
    expect(item).to_contain_text("rejected")
    assert MemoryEntry.objects.get(pk=tea.pk).status == "rejected"
