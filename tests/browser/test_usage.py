"""The usage page in a browser: a person sees only their own usage, staff see everyone's;
the chart renders under the site's CSP (Chart.js from static/vendor, fed by a JSON script
tag, no inline code); the CSV matches the table; without JavaScript the table is there."""

import csv
import io

from playwright.sync_api import expect

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from tests.browser.conftest import BROWSER_TIMEOUT_MS
from tests.browser.test_security import watch_policy
from usage.models import Kind, ModelPrice
from usage.services import usage_record


def seed(make_person):
    alice = make_person("alice")
    bob = make_person("bob")
    stella = make_person("stella", is_staff=True)
    ModelPrice.objects.create(model="m", input_per_million=1, output_per_million=2)
    for person, title, tokens in ((alice, "Alice's room", 1200), (bob, "Bob's room", 3400)):
        room, _ = chat_get_or_create(channel="web", chat_id=f"{person}-room", title=title)
        chat_member_ensure(chat=room, person=person, role=ChatMember.Role.OWNER)
        usage_record(
            kind=Kind.TURN,
            chat_id=room.pk,
            person_id=person.pk,
            model="m",
            prompt_tokens=tokens,
            completion_tokens=tokens // 4,
        )
    return alice, bob, stella


def shown_table(page) -> list[list[str]]:
    rows = page.locator("#usage-table tbody tr")
    cells = []
    for index in range(rows.count()):
        texts = [t.strip() for t in rows.nth(index).locator("th, td").all_inner_texts()]
        cells.append(texts[:-1])  # the last cell is the "records" link
    return cells


def downloaded_csv(page) -> list[list[str]]:
    href = page.locator("#usage-csv").get_attribute("href")
    response = page.request.get(href)
    assert response.ok and response.headers["content-type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.text())))[1:]


def test_a_person_sees_only_their_own_usage_and_the_chart_renders(page_for, make_person):
    alice, bob, stella = seed(make_person)
    page = page_for(alice)
    violations = watch_policy(page)
    page.goto("/usage/?by=person")
    expect(page.locator("#usage-chart")).to_have_attribute("data-rendered", "true")
    expect(page.locator("#usage-chart")).to_be_visible()
    assert page.locator("#usage-chart").bounding_box()["height"] > 50
    assert shown_table(page) == [["alice", "1", "1200", "300", "1500", "0", "0.001800 USD"]]
    assert "bob" not in page.locator("main").inner_text()
    assert downloaded_csv(page) == shown_table(page)
    page.goto("/usage/?by=chat")
    assert [row[0] for row in shown_table(page)] == ["Alice's room"]
    assert downloaded_csv(page) == shown_table(page)
    assert violations == []


def test_staff_see_everyones_usage(page_for, make_person):
    alice, bob, stella = seed(make_person)
    page = page_for(stella)
    violations = watch_policy(page)
    page.goto("/usage/?by=person")
    expect(page.locator("#usage-chart")).to_have_attribute("data-rendered", "true")
    table = shown_table(page)
    assert [row[0] for row in table] == ["bob", "alice"]  # largest first
    assert downloaded_csv(page) == table
    page.goto("/usage/?by=day")
    assert shown_table(page)[0][4] == str(1500 + 4250)
    assert downloaded_csv(page) == shown_table(page)
    page.click("#usage-records")
    expect(page.locator("#records-table tbody tr")).to_have_count(2)
    assert violations == []


def test_without_javascript_the_table_holds_the_figures(chromium_browser, live_stack, make_person):
    alice, bob, stella = seed(make_person)
    context = chromium_browser.new_context(base_url=live_stack.url, java_script_enabled=False)
    context.set_default_timeout(BROWSER_TIMEOUT_MS)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "pw-alice-123!")
    page.click("button[type=submit]")
    page.goto("/usage/?by=day")
    assert not page.locator("#usage-chart").is_visible()
    assert shown_table(page)[0][1:] == ["1", "1200", "300", "1500", "0", "0.001800 USD"]
    context.close()
