"""Approval of a risky tool call in Chromium, on the real product (daphne + a Celery worker
running the probe MCP server over stdio, the fake model): two people in one web room, the
member asks, both see the card, only the owner decides, and the call runs exactly once;
decline and no decision in time."""

import re

import pytest
from playwright.sync_api import expect

from chats.models import ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure
from tests.browser.conftest import composer_fill
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.approvals import approvals_expire
from toolservers.models import ToolApproval, ToolCall

WAIT = 30_000  # the worker's first turn starts the probe server


@pytest.fixture
def room(owner, member, tmp_path):
    chat, _ = chat_get_or_create(channel="web", chat_id="deploys", kind="room", title="Deploys")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    # append_line asks; the folder it writes in is named, so the sandbox shows it.
    enable(chat, add_server("probe", stdio=[PYTHON, PROBE, str(tmp_path)]))
    return chat


@pytest.fixture
def log(tmp_path):
    return tmp_path / "deploy.log"


def open_room(page, chat):
    page.goto(f"/chats/{chat.chat_key}/")
    expect(page.locator("h1")).to_have_text(chat.title)


def send(page, text):
    composer_fill(page, text)
    page.keyboard.press("Enter")


def append(log):
    return fake_openai.tool_calls([("c1", "probe__append_line", {"path": str(log), "line": "ok"})])


def lines(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def open_card(page):
    card = page.locator("#approvals article.approval-pending")
    expect(card).to_have_count(1, timeout=WAIT)
    return card


def post_as_page(page, url, data) -> int:
    """A POST from inside the page, with its session and CSRF header, as a script could."""
    return page.evaluate(
        """async ([url, data]) => {
            const headers = JSON.parse(document.body.getAttribute("hx-headers"));
            const body = new URLSearchParams(data);
            const response = await fetch(url, {method: "POST", headers, body});
            return response.status;
        }""",
        [url, data],
    )


def test_the_owner_approves_what_a_member_asked_and_the_call_runs_once(
    page_for, live_stack, fake_llm, room, owner, member, log
):
    # A slow reply after the call, so the page is seen typing again while it streams.
    fake_llm.script(append(log), fake_openai.text("Deployed and logged. " * 60, delay=0.05))
    owner_page, member_page = page_for(owner), page_for(member)
    open_room(owner_page, room)
    open_room(member_page, room)
    send(member_page, "deploy and log it")

    cards = {"owner": open_card(owner_page), "member": open_card(member_page)}
    for card in cards.values():  # the exact call, for everyone watching
        expect(card.locator(".approval-function")).to_have_text("probe__append_line")
        expect(card.locator(".approval-server")).to_have_text("probe")
        expect(card.locator(".approval-tool")).to_have_text("append_line")
        expect(card.locator(".approval-requester")).to_have_text("marco")
        expect(card.locator(".approval-arguments")).to_contain_text(f'"path": "{log}"')
    for page in (owner_page, member_page):
        expect(page.locator("article.is-streaming .typing")).to_have_text("waiting for approval")
    expect(cards["member"].locator("button")).to_have_count(0)
    expect(cards["member"]).to_contain_text("Waiting for an owner or admin to approve.")
    expect(cards["owner"].locator("button.approve")).to_be_visible()
    turn = Turn.objects.get(chat=room)
    assert turn.status == Turn.Status.WAITING and lines(log) == []

    # The member has the card's nonce (every socket of the chat carries it): still refused.
    approval = ToolApproval.objects.get(turn=turn)
    full = f"/chats/{room.chat_key}/approvals/{approval.pk}/arguments"
    for card in cards.values():  # every card links the whole call
        expect(card.locator(".approval-all a")).to_have_attribute("href", full)
    url = f"/chats/{room.chat_key}/approvals/{approval.pk}/decide"
    refused = post_as_page(member_page, url, {"nonce": approval.nonce, "decision": "approve"})
    assert refused == 403
    assert ToolApproval.objects.get(pk=approval.pk).status == ToolApproval.Status.PENDING

    cards["owner"].locator("button.approve").click()
    decided = f"#approval-{approval.pk} .approval-outcome"
    for page in (owner_page, member_page):
        expect(page.locator(decided)).to_have_text("olivia approved probe__append_line.")
    resumed = member_page.locator("article.is-streaming")
    expect(resumed.locator(".body")).to_contain_text("Deployed", timeout=WAIT)
    expect(resumed.locator(".typing")).to_have_text("typing…")
    expect(resumed).not_to_have_class(re.compile(r"\bis-waiting\b"))
    for page in (owner_page, member_page):
        reply = page.locator("article.message-assistant:not(.is-streaming)", has_text="Deployed")
        expect(reply).to_have_count(1, timeout=WAIT)  # the turn went on, on the real worker
        expect(page.locator("article.is-streaming")).to_have_count(0)
    assert lines(log) == ["ok"]  # the call ran exactly once
    audit = ToolCall.objects.get(chat=room, tool="append_line")
    assert (audit.decision, audit.decided_by, audit.person) == ("approved", owner, member)
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.COMPLETED
    # A second press, from a page still showing an open card, decides nothing.
    again = post_as_page(owner_page, url, {"nonce": approval.nonce, "decision": "decline"})
    assert again == 409 and lines(log) == ["ok"]


def test_a_card_shows_every_key_marks_hidden_characters_and_opens_the_full_view(
    page_for, live_stack, fake_llm, room, owner, member, tmp_path
):
    # "line" sorts before "path": 10,000 harmless characters must not push the path away.
    target = f"{tmp_path}/\u202egol.sh"
    call = {"line": "harmless " * 1200, "path": target}
    fake_llm.script(fake_openai.tool_calls([("c1", "probe__append_line", call)]))
    page = page_for(owner)
    open_room(page, room)
    send(page, "append it")
    card = open_card(page)
    shown = card.locator(".approval-arguments")
    expect(shown).to_contain_text(f'"path": "{tmp_path}/⟦U+202E⟧gol.sh"')
    expect(card.locator(".approval-cut")).to_contain_text("characters — see all")
    card.locator(".approval-cut a").click()
    expect(page.locator("h1")).to_have_text("Arguments of probe__append_line")
    expect(page.locator(".approval-full")).to_contain_text("harmless " * 1200)
    page.locator("button.decline").click()  # deciding on the whole call, there
    expect(page.locator(".approval-outcome")).to_contain_text("olivia declined")
    assert not (tmp_path / "\u202egol.sh").exists()


def test_a_declined_call_is_not_run_and_everyone_sees_who_declined(
    page_for, live_stack, fake_llm, room, owner, member, log
):
    fake_llm.script(append(log), fake_openai.text("Understood, I did not deploy."))
    member_page = page_for(member)
    open_room(member_page, room)
    send(member_page, "deploy and log it")
    open_card(member_page)
    owner_page = page_for(owner)
    open_room(owner_page, room)  # the open card comes with the page
    open_card(owner_page).locator("button.decline").click()
    for page in (owner_page, member_page):
        expect(page.locator(".approval-outcome")).to_contain_text("olivia declined")
        reply = page.locator("article.message-assistant", has_text="I did not deploy.")
        expect(reply).to_have_count(1, timeout=WAIT)
    assert lines(log) == []
    told = Message.objects.get(chat=room, role=Message.Role.TOOL)
    assert "olivia declined this call" in told.text
    assert ToolCall.objects.get(chat=room, tool="append_line").decision == "rejected"


def test_no_decision_in_time_denies_the_call_and_the_page_says_so(
    page_for, live_stack, fake_llm, room, owner, member, log
):
    fake_llm.script(append(log), fake_openai.text("Nobody approved it in time."))
    member_page = page_for(member)
    open_room(member_page, room)
    send(member_page, "deploy and log it")
    open_card(member_page)
    approval = ToolApproval.objects.get(chat=room)
    # What beat runs, at the card's deadline (no waiting in the test): the turn is queued
    # again for the real worker, which tells the model.
    assert approvals_expire(now=approval.expires_at) == 1
    expect(member_page.locator(".approval-outcome")).to_contain_text("No decision in time")
    reply = member_page.locator("article.message-assistant", has_text="Nobody approved it")
    expect(reply).to_have_count(1, timeout=WAIT)
    assert lines(log) == []
    told = Message.objects.get(chat=room, role=Message.Role.TOOL)
    assert "nobody decided within" in told.text
    assert ToolCall.objects.get(chat=room, tool="append_line").decision == "expired"
