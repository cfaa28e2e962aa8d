"""A schedule made on a chat's Schedules panel in Chromium, on the real product (daphne, a
Celery worker, the fake model): the live preview of its fire times (and of a wrong cron
field), creating it, running it now, the agent's reply in the chat and the run's receipt
back on the panel; no page trips the Content Security Policy."""

import os
import re
import time

import pytest
from playwright.sync_api import expect

from chats.models import ChatMember, Message
from chats.services import chat_get_or_create, chat_member_ensure
from schedules.models import Schedule, ScheduleRun
from tests.browser.conftest import RequestsInFlight
from tests.browser.test_security import watch_policy
from tests.fakes import openai_server as fake_openai

WAIT = 30_000


@pytest.fixture
def room(owner, member):
    chat, _ = chat_get_or_create(channel="web", chat_id="ops", kind="room", title="Ops")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    return chat


def settled(run_id: int, timeout: float = WAIT / 1000) -> ScheduleRun:
    """The run once its outcome is recorded (by the worker's turn_finished hook)."""
    deadline = time.monotonic() + timeout
    while True:
        run = ScheduleRun.objects.get(pk=run_id)
        if run.status in ScheduleRun.FINISHED or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def test_create_a_schedule_preview_it_run_it_now_and_see_the_reply_and_receipt(
    page_for, live_stack, fake_llm, room, owner, member
):
    fake_llm.script(fake_openai.text("Two incidents are open: the VPN and the mail relay."))
    page = page_for(owner)
    violations = watch_policy(page)
    page.goto(f"/chats/{room.chat_key}/")
    page.click("#schedules-link")
    expect(page.locator("h1")).to_have_text("Schedules in this chat")
    expect(page.locator("#no-schedules")).to_be_visible()
    # The worker's beat is not running in this stack: the page says schedules will not fire.
    expect(page.locator("#scheduler-down")).to_contain_text("schedules will not fire")

    form = page.locator("#schedule-create")
    form.locator("textarea[name=prompt]").fill("Post the open incidents")
    form.locator("input[name=timezone]").fill("Europe/Berlin")
    # A wrong field is named while typing, before anything is stored.
    form.locator("input[name=cron]").fill("0 25 * * 1-5")
    expect(page.locator("#preview-error")).to_contain_text("the hour field '25' is not valid")
    form.locator("input[name=cron]").fill("0 9 * * 1-5")
    expect(page.locator("#preview-description")).to_have_text(
        "At 09:00, Monday through Friday (Europe/Berlin)"
    )
    rows = page.locator("#preview-times tbody tr")
    expect(rows).to_have_count(5)
    # Each slot in the schedule's zone (09:00 CET/CEST) and the viewer's (the site's UTC).
    expect(rows.first.locator("td").first).to_contain_text(re.compile(r"09:00 CES?T"))
    expect(rows.first.locator("td").nth(1)).to_contain_text(re.compile(r"0[78]:00 UTC"))
    form.locator("button[type=submit]").click()

    schedule = Schedule.objects.get(chat=room)
    entry = page.locator(f"#schedule-{schedule.pk}")
    expect(entry.locator("[data-description]")).to_have_text(
        "At 09:00, Monday through Friday (Europe/Berlin)"
    )
    expect(entry.locator("[data-next-times] tbody tr")).to_have_count(5)
    assert (schedule.owner, schedule.cron, schedule.timezone) == (
        owner,
        "0 9 * * 1-5",
        "Europe/Berlin",
    )

    entry.locator("[data-run-now]").click()
    expect(page.get_by_role("status")).to_contain_text(f"Schedule #{schedule.pk} runs now")
    run = ScheduleRun.objects.get(schedule=schedule)
    assert run.turn_id is not None  # the run started a turn on the normal turn path

    # A member watching the chat sees what was asked, by whom, and the agent's reply.
    watcher = page_for(member)
    watcher.goto(f"/chats/{room.chat_key}/")
    asked = watcher.locator("article.message-user", has_text="Post the open incidents")
    expect(asked.locator(".author")).to_have_text("scheduled by olivia")
    reply = watcher.locator("article.message-assistant", has_text="Two incidents are open")
    expect(reply).to_have_count(1, timeout=WAIT)

    run = settled(run.pk)
    assert run.status == ScheduleRun.Status.DELIVERED, (run.status, run.error)
    answer = Message.objects.get(chat=room, role=Message.Role.ASSISTANT)
    page.reload()
    receipt = page.locator(f"#run-{run.pk}")
    expect(receipt.locator("[data-status]")).to_have_text("Delivered")
    expect(receipt.locator("[data-receipt]")).to_contain_text(
        f"message #{answer.pk} in web: delivered"
    )
    if os.environ.get("HERMES_SCREENSHOTS"):
        page.screenshot(path=os.environ["HERMES_SCREENSHOTS"] + "/schedules.png", full_page=True)
    receipt.locator("[data-receipt] a").click()
    expect(page.locator(f"#message-{answer.pk}")).to_contain_text("Two incidents are open")

    page.goto("/schedules/")
    expect(page.locator(f"#schedule-{schedule.pk} [data-prompt]")).to_have_text(
        "Post the open incidents"
    )
    page.goto(f"/schedules/{schedule.pk}/edit")
    expect(page.locator("#preview-times tbody tr")).to_have_count(5)
    settle = RequestsInFlight(page)
    page.goto("/settings/time-zone/")
    settle.wait_quiet("/settings/time-zone/")
    assert violations == []
