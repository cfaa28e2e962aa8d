"""Tool calls decided by Telegram buttons: a call of a Telegram group waits (the real engine,
the fake model, the probe server); its card goes to each decider's private chat and the group
reads a notice; a press decides only as a linked decider in their own private chat, with the
card's nonce; forged and stale presses decide nothing; /stop ends a waiting turn."""

from datetime import timedelta

import pytest
from django.utils import timezone

from bots.models import OutboundMessage
from bots.selectors import turn_outcome
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, turn_claim
from chats.models import ChatKind, ChatMember, Turn
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from tests.bots.conftest import GROUP_ID, process
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import (
    BotMessage,
    FakeTelegram,
    check_html,
    group_chat,
    tg_user,
    utf16_len,
)
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.approvals import approval_decide, approvals_expire
from toolservers.models import ChatToolset, ToolApproval

pytestmark = [pytest.mark.storage, pytest.mark.django_db(transaction=True)]

OLIVIA = tg_user(1001, "Olivia")  # owner of the group: a decider
MARCO = tg_user(1002, "Marco")  # a member: asks, decides nothing
STELLA = tg_user(1003, "Stella")  # staff: a decider everywhere
GINA = tg_user(1004, "Gina")  # owner of another chat
NADIA = tg_user(1005, "Nadia")  # allowed on Telegram, never linked
OSCAR = tg_user(1006, "Oscar")  # linked, in no chat
GROUP = group_chat(GROUP_ID, "Ops")
TG = FakeTelegram()  # not started: it builds updates with fresh update ids


@pytest.fixture(autouse=True)
def telegram(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_ALLOWED_USERS = [str(u["id"]) for u in (OLIVIA, MARCO, STELLA, GINA, NADIA)]
    settings.TELEGRAM_ALLOWED_CHATS = [str(GROUP_ID)]
    settings.TELEGRAM_GROUP_TRIGGER = "mention"


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


@pytest.fixture
def enqueued(monkeypatch):
    """Celery's side of the boundary: which turns were handed to a worker."""
    from chats.tasks import run_turn

    handed: list[int] = []
    monkeypatch.setattr(run_turn, "delay", lambda turn_id: handed.append(turn_id))
    return handed


@pytest.fixture
def people(make_person):
    olivia, marco = make_person("olivia"), make_person("marco")
    stella = make_person("stella", is_staff=True)
    gina, oscar = make_person("gina"), make_person("oscar")
    make_person("sam", is_staff=True)  # a decider without Telegram: nothing to send
    for user, person in ((OLIVIA, olivia), (MARCO, marco), (STELLA, stella), (GINA, gina)):
        actor_get_or_create(
            channel="telegram", user_id=user["id"], display_name=user["first_name"], person=person
        )
    actor_get_or_create(channel="telegram", user_id=OSCAR["id"], display_name="Oscar", person=oscar)
    actor_get_or_create(channel="telegram", user_id=NADIA["id"], display_name="Nadia")
    other, _ = chat_get_or_create(channel="web", chat_id="gina-room", title="Gina's room")
    chat_member_ensure(chat=other, person=gina, role=ChatMember.Role.OWNER)
    return {"olivia": olivia, "marco": marco, "stella": stella, "gina": gina}


@pytest.fixture
def group(people, tmp_path):
    chat, _ = chat_get_or_create(
        channel="telegram", chat_id=str(GROUP_ID), kind=ChatKind.GROUP, title="Ops"
    )
    chat_member_ensure(chat=chat, person=people["olivia"], role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=people["marco"])
    # append_line: "ask"; the folder it writes in is named, so the sandbox shows it.
    enable(chat, add_server("probe", stdio=[PYTHON, PROBE, str(tmp_path)]))
    return chat


@pytest.fixture
def log(tmp_path):
    return tmp_path / "deploy.log"


def run(turn) -> Turn:
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED, claim.outcome
    return run_claimed_turn(claim.turn, provider=get_provider())


def lines(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def waiting(fake, group, log, enqueued):
    """Marco asks the bot in the group for a call that needs a decider; the turn waits."""
    fake.script(
        fake_openai.tool_calls([("c1", "probe__append_line", {"path": str(log), "line": "go"})]),
        fake_openai.text("Deployed and logged."),
    )
    outcome = process(TG.message(GROUP, MARCO, "@hermes_test_bot deploy and log it"))
    assert outcome.result == "answering"
    enqueued.clear()
    turn = run(outcome.turn)
    assert turn.status == Turn.Status.WAITING
    deliver()
    return turn


def deliver() -> None:
    """The bot process sent every pending message (each gets its Telegram message id)."""
    for row in OutboundMessage.objects.filter(kind="send", status="pending"):
        row.status, row.message_ids = "delivered", [5000 + row.pk]
        row.save(update_fields=["status", "message_ids"])


def cards() -> dict[int, OutboundMessage]:
    rows = OutboundMessage.objects.filter(kind="send", payload__has_key="tool_approval_id")
    return {row.telegram_chat_id: row for row in rows}


def group_notices() -> list[str]:
    rows = OutboundMessage.objects.filter(kind="send", telegram_chat_id=GROUP_ID).order_by("id")
    return [visible(row.payload["text"]) for row in rows]


def edits_of(row: OutboundMessage) -> list[str]:
    rows = OutboundMessage.objects.filter(kind="edit", telegram_chat_id=row.telegram_chat_id)
    return [
        visible(edit.payload["text"])
        for edit in rows
        if edit.payload["message_id"] == row.message_ids[0] and "reply_markup" not in edit.payload
    ]


def visible(text: str) -> str:
    error, shown = check_html(text)
    assert error is None, error
    assert utf16_len(shown) <= 4096
    return shown


def data_of(row: OutboundMessage, action: str = "a") -> str:
    buttons = [b for line in row.payload["reply_markup"]["inline_keyboard"] for b in line]
    return next(b["callback_data"] for b in buttons if b["callback_data"].endswith(f":{action}"))


def press(user, row: OutboundMessage, data: str, chat: dict | None = None):
    """`user` presses a button with `data` on (a copy of) the card `row`, by default in
    their own private chat with the bot."""
    chat = chat or {"id": user["id"], "type": "private", "first_name": user["first_name"]}
    TG._chats[chat["id"]] = chat
    shown = BotMessage(
        chat_id=chat["id"],
        message_id=row.message_ids[0] if row.message_ids else 900,
        text=row.payload["text"],
        parse_mode="HTML",
        thread_id=None,
        reply_to=None,
        reply_markup=row.payload.get("reply_markup"),
        sent_at=0,
    )
    return process(TG.press(user, shown, data))


def answer(outcome) -> str:
    return next(row.payload["text"] for row in outcome.outbound if row.kind == "answer")


def state(turn) -> tuple[str, str]:
    return ToolApproval.objects.get(turn=turn).status, Turn.objects.get(pk=turn.pk).status


def test_each_decider_gets_the_card_in_private_and_the_group_a_notice(waiting, log):
    rows = cards()
    # The owner and staff with Telegram; not the member who asked, an outsider, the owner of
    # another chat or an unlinked user.
    assert set(rows) == {OLIVIA["id"], STELLA["id"]}
    card = ToolApproval.objects.get(turn=waiting)
    shown = visible(rows[OLIVIA["id"]].payload["text"])
    assert "A tool call waits for your decision" in shown
    assert "Tool: append_line on server probe" in shown
    assert "Asked by Marco in “Ops” (group)" in shown
    assert f'"path": "{log}"' in shown and '"line": "go"' in shown
    assert f"Decide by {card.expires_at:%Y-%m-%d %H:%M} UTC" in shown
    assert [data_of(rows[OLIVIA["id"]], a) for a in "adw"] == [
        f"tool:{card.pk}:{card.nonce}:{a}" for a in "adw"
    ]
    for row in rows.values():
        keyboard = row.payload["reply_markup"]["inline_keyboard"]
        labels = [button["text"] for line in keyboard for button in line]
        assert labels == ["✅ Approve", "✖️ Decline", "♾ Always allow here"]
        assert all(len(b["callback_data"].encode()) <= 64 for line in keyboard for b in line)
    # The group reads that a call waits, under the message that asked: the tool, no arguments.
    [notice] = group_notices()
    assert "A call of probe__append_line (asked by Marco) waits for a decider" in notice
    assert str(log) not in notice and '"go"' not in notice
    group_row = OutboundMessage.objects.get(kind="send", telegram_chat_id=GROUP_ID)
    assert "reply_markup" not in group_row.payload
    assert group_row.reply_to_message_id == waiting.trigger.metadata["telegram"]["message_id"]


def test_a_deciders_press_approves_the_call_and_the_turn_goes_on(waiting, log, people, enqueued):
    rows = cards()
    reply = OutboundMessage.objects.get(kind="reply", turn=waiting)
    assert reply.status == "pending" and turn_outcome(turn_id=waiting.pk) is None  # stays open

    outcome = press(OLIVIA, rows[OLIVIA["id"]], data_of(rows[OLIVIA["id"]]))
    assert outcome.result == "tools:decided"
    assert answer(outcome) == "Call approved: probe__append_line."
    card = ToolApproval.objects.get(turn=waiting)
    assert (card.status, card.decided_by, card.decided_via) == (
        "approved",
        people["olivia"],
        "telegram",
    )
    assert Turn.objects.get(pk=waiting.pk).status == Turn.Status.QUEUED
    assert enqueued == [waiting.pk]  # handed to a worker again, once
    # Every copy of the card shows the outcome and lost its buttons; the group reads who.
    for row in rows.values():
        [edited] = edits_of(row)
        assert "✅ Approved by olivia: the call runs now." in edited
        assert '"line": "go"' in edited
    assert "✅ The call of probe__append_line was approved by olivia." in group_notices()

    turn = run(waiting)
    assert turn.status == Turn.Status.COMPLETED and lines(log) == ["go"]
    assert turn_outcome(turn_id=turn.pk).reply_text == "Deployed and logged."
    reply.refresh_from_db()
    assert reply.status == "pending"  # still the same one reply for the bot to deliver
    assert OutboundMessage.objects.filter(kind="reply").count() == 1


def test_always_allow_here_approves_and_sets_the_tool_allowed_in_the_chat(waiting, group, people):
    row = cards()[STELLA["id"]]
    outcome = press(STELLA, row, data_of(row, "w"))
    assert outcome.result == "tools:decided"
    policy = ChatToolset.objects.get(chat=group, tool_name="append_line")
    assert (policy.policy, policy.set_by) == ("allow", people["stella"])
    [edited] = edits_of(row)
    assert "always allowed in this chat from now on" in edited


def test_a_decline_by_button_runs_nothing(waiting, log):
    row = cards()[OLIVIA["id"]]
    assert press(OLIVIA, row, data_of(row, "d")).result == "tools:decided"
    assert state(waiting) == ("denied", "queued")
    assert "✖️ Declined by olivia: the call was not run." in edits_of(row)[0]
    assert "✖️ The call of probe__append_line was declined by olivia; it was not run." in (
        group_notices()
    )
    assert run(waiting).status == Turn.Status.COMPLETED and lines(log) == []


def test_forged_presses_decide_nothing(waiting, enqueued):
    row = cards()[OLIVIA["id"]]
    card = ToolApproval.objects.get(turn=waiting)
    forged = [
        f"tool:{card.pk}:wrongnonce0000:a",  # a guessed nonce
        f"tool:{card.pk + 1000}:{card.nonce}:a",  # no such card
        f"tool:{card.pk}:{card.nonce}:a:{OLIVIA['id']}",  # a person named in the data
        f"tool:{card.pk}:{card.nonce}:x",  # no such decision
        f"tool:abc:{card.nonce}:a",
        "tool:",
    ]
    for data in forged:
        outcome = press(OLIVIA, row, data)
        assert outcome.result == "tools:forged", data
        assert answer(outcome) == "This card is not valid: nothing was decided."
        assert [r.kind for r in outcome.outbound] == ["answer"]  # the card is not touched
    assert state(waiting) == ("pending", "waiting") and enqueued == []
    assert not OutboundMessage.objects.filter(kind="edit").exists()


def test_a_second_press_is_stale_and_says_so(waiting, enqueued):
    olivia, stella = cards()[OLIVIA["id"]], cards()[STELLA["id"]]
    press(OLIVIA, olivia, data_of(olivia, "d"))
    for user, row in ((OLIVIA, olivia), (STELLA, stella)):
        again = press(user, row, data_of(row, "a"))
        assert again.result == "tools:stale"
        assert answer(again) == "This card is no longer open (declined): nothing was decided."
        edit = next(r for r in again.outbound if r.kind == "edit")
        assert "Declined by olivia" in visible(edit.payload["text"])
        assert "reply_markup" not in edit.payload
    assert state(waiting) == ("denied", "queued") and enqueued == [waiting.pk]


def test_a_card_decided_on_the_dashboard_is_stale_on_telegram(waiting, people):
    card = ToolApproval.objects.get(turn=waiting)
    result = approval_decide(
        approval_id=card.pk, nonce=card.nonce, person=people["stella"], approve=True
    )
    assert result.outcome.value == "decided"
    row = cards()[OLIVIA["id"]]
    assert "✅ Approved by stella" in edits_of(row)[0]  # her copy was updated already
    late = press(OLIVIA, row, data_of(row, "d"))
    assert late.result == "tools:stale"
    assert "no longer open (approved)" in answer(late)
    assert state(waiting) == ("approved", "queued")


def test_an_expired_card_is_stale_and_the_copies_say_no_decision_in_time(waiting, enqueued):
    assert approvals_expire(now=timezone.now() + timedelta(days=1)) == 1
    row = cards()[OLIVIA["id"]]
    assert "⌛ No decision in time: the call was not run." in edits_of(row)[0]
    assert "⌛ Nobody decided the call of probe__append_line in time; it was not run." in (
        group_notices()
    )
    late = press(OLIVIA, row, data_of(row))
    assert late.result == "tools:stale"
    assert "no longer open (no decision in time)" in answer(late)
    assert state(waiting) == ("expired", "queued") and enqueued == [waiting.pk]


def test_a_card_past_its_time_but_not_yet_expired_is_stale_too(waiting):
    ToolApproval.objects.filter(turn=waiting).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    row = cards()[STELLA["id"]]
    assert press(STELLA, row, data_of(row)).result == "tools:stale"
    assert state(waiting) == ("expired", "queued")


def test_people_who_are_not_deciders_are_refused(waiting, people, enqueued):
    row = cards()[OLIVIA["id"]]
    approve = data_of(row)
    # The member who asked (a forwarded card), the owner of another chat and a linked person
    # in no chat, each in their own private chat with the data of a real button.
    for user in (MARCO, GINA, OSCAR):
        outcome = press(user, row, approve)
        assert outcome.result == "tools:forbidden", user
        assert answer(outcome).startswith("Only this chat's owners and admins")
        assert [r.kind for r in outcome.outbound] == ["answer"]
    unlinked = press(NADIA, row, approve)
    assert unlinked.result == "tools:not linked"
    assert "Link this Telegram account" in answer(unlinked)
    # A decider deactivated after the card went out decides nothing with it.
    people["olivia"].is_active = False
    people["olivia"].save()
    assert press(OLIVIA, row, approve).result == "tools:forbidden"
    assert state(waiting) == ("pending", "waiting") and enqueued == []


def test_a_press_in_a_group_is_refused_even_by_a_decider(waiting, enqueued):
    row = cards()[OLIVIA["id"]]
    outcome = press(OLIVIA, row, data_of(row), chat=GROUP)
    assert outcome.result == "tools:not private"
    assert answer(outcome) == "Tool calls are decided in your private chat with me."
    assert [r.kind for r in outcome.outbound] == ["answer"]
    assert outcome.outbound[0].telegram_chat_id == GROUP_ID
    assert state(waiting) == ("pending", "waiting") and enqueued == []


def test_stop_in_the_group_ends_the_waiting_turn_and_voids_the_cards(waiting, log, enqueued):
    stopped = process(TG.message(GROUP, MARCO, "/stop"))
    assert stopped.result == "command:stop"
    assert visible(stopped.outbound[0].payload["text"]) == "Stopped."
    turn = Turn.objects.get(pk=waiting.pk)
    assert turn.status == Turn.Status.INTERRUPTED
    assert "stopped from Telegram by Marco" in turn.interrupt_reason
    assert state(waiting) == ("cancelled", "interrupted")
    row = cards()[OLIVIA["id"]]
    assert "⏹ Void: the reply that asked for it was stopped or replaced" in edits_of(row)[0]
    assert "⏹ The call of probe__append_line no longer waits; it was not run." in (group_notices())
    late = press(OLIVIA, row, data_of(row))
    assert late.result == "tools:stale" and enqueued == [] and lines(log) == []
    # The open reply ends with the turn (nothing to say: it had written nothing).
    assert turn_outcome(turn_id=waiting.pk).status == Turn.Status.INTERRUPTED


def test_a_card_not_yet_sent_goes_out_decided(waiting, people):
    card = ToolApproval.objects.get(turn=waiting)
    row = cards()[OLIVIA["id"]]
    OutboundMessage.objects.filter(pk=row.pk).update(status="pending", message_ids=[])
    approval_decide(approval_id=card.pk, nonce=card.nonce, person=people["stella"], approve=True)
    row.refresh_from_db()
    assert "reply_markup" not in row.payload
    assert "✅ Approved by stella" in visible(row.payload["text"])


def test_hostile_arguments_stay_inert_and_a_huge_call_is_cut_to_fit(
    fake, group, enqueued, tmp_path
):
    hostile = "</pre><b>x</b>\u200b & " + "🚀 long line of text\n" * 400
    fake.script(
        fake_openai.tool_calls(
            [("c1", "probe__append_line", {"path": str(tmp_path / "x"), "line": hostile})]
        )
    )
    outcome = process(TG.message(GROUP, MARCO, "@hermes_test_bot go"))
    assert run(outcome.turn).status == Turn.Status.WAITING
    text = cards()[OLIVIA["id"]].payload["text"]
    shown = visible(text)  # Telegram's HTML parser accepts it, within 4,096
    assert "</pre><b>x</b>⟦U+200B⟧ &amp;" not in text and "\u200b" not in text
    assert "&lt;/pre&gt;&lt;b&gt;x&lt;/b&gt;⟦U+200B⟧ &amp;" in text
    assert "the dashboard shows all of them" not in shown  # it did not; now a link does
    assert "Showing " in shown and " characters — see all" in shown and "Decide by" in shown
    assert utf16_len(shown) > 3500  # cut to fit, not to nothing


def test_a_long_field_cannot_hide_another_and_the_card_links_the_full_view(
    fake, group, enqueued, tmp_path, settings
):
    settings.DASHBOARD_URL = "https://hub.example.com/"
    # "line" sorts before "path": 10,000 harmless characters must not push the path away.
    target = f"{tmp_path}/\u202egol.sh"
    call = {"line": "harmless " * 1200, "path": target}
    fake.script(fake_openai.tool_calls([("c1", "probe__append_line", call)]))
    outcome = process(TG.message(GROUP, MARCO, "@hermes_test_bot go"))
    assert run(outcome.turn).status == Turn.Status.WAITING
    approval = ToolApproval.objects.get(turn=outcome.turn)
    row = cards()[OLIVIA["id"]]
    shown = visible(row.payload["text"])
    assert f'"path": "{tmp_path}/⟦U+202E⟧gol.sh"' in shown
    assert '"line": "harmless harmless' in shown
    assert "of 10,8" in shown and "characters — see all" in shown
    url = f"https://hub.example.com/chats/{group.chat_key}/approvals/{approval.pk}/arguments"
    assert f'<a href="{url}">' in row.payload["text"]
    buttons = [b for line in row.payload["reply_markup"]["inline_keyboard"] for b in line]
    assert {"text": "🔎 All arguments", "url": url} in buttons


def test_without_a_public_address_the_card_names_the_full_view_without_a_button(
    fake, group, enqueued, tmp_path, settings
):
    settings.DASHBOARD_URL = ""  # Telegram refuses buttons to a loopback address
    settings.TELEGRAM_WEBHOOK_URL = ""
    call = {"line": "go", "path": str(tmp_path / "x")}
    fake.script(fake_openai.tool_calls([("c1", "probe__append_line", call)]))
    outcome = process(TG.message(GROUP, MARCO, "@hermes_test_bot go"))
    assert run(outcome.turn).status == Turn.Status.WAITING
    approval = ToolApproval.objects.get(turn=outcome.turn)
    row = cards()[OLIVIA["id"]]
    shown = visible(row.payload["text"])
    assert f"/chats/{group.chat_key}/approvals/{approval.pk}/arguments" in shown
    assert "Showing" not in shown  # nothing cut, nothing claimed
    buttons = [b for line in row.payload["reply_markup"]["inline_keyboard"] for b in line]
    assert all("url" not in button for button in buttons)
