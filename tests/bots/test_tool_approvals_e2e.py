"""A tool call decided by a Telegram button, end to end: the real bot process against the
fake Bot API server (real HTTP, Telegram's HTML check), a Celery worker running the turn and
the probe tool server, the fake model and the test database. Assertions are what the people
in the group and the decider's private chat see."""

import pytest

from bots.models import OutboundMessage
from chats.models import ChatKind, ChatMember, Turn
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from tests.bots.conftest import GROUP_ID
from tests.bots.test_end_to_end import final_text, replies_done, wait
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import group_chat, tg_user
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.models import ToolApproval

pytestmark = pytest.mark.timeout(240)

OLIVIA = tg_user(1001, "Olivia")
MARCO = tg_user(1002, "Marco")


def test_a_call_waits_for_a_button_and_the_reply_comes_once_after_the_approval(
    telegram_live, make_person, tmp_path
):
    tg, llm = telegram_live.tg, telegram_live.llm
    olivia, marco = make_person("olivia"), make_person("marco")
    for user, person in ((OLIVIA, olivia), (MARCO, marco)):
        actor_get_or_create(
            channel="telegram", user_id=user["id"], display_name=user["first_name"], person=person
        )
    group, _ = chat_get_or_create(
        channel="telegram", chat_id=str(GROUP_ID), kind=ChatKind.GROUP, title="Ops"
    )
    chat_member_ensure(chat=group, person=olivia, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=group, person=marco)
    # The folder append_line writes in is named, so the sandbox shows it.
    enable(group, add_server("probe", stdio=[PYTHON, PROBE, str(tmp_path)]))
    log = tmp_path / "deploy.log"
    llm.script(
        fake_openai.tool_calls([("c1", "probe__append_line", {"path": str(log), "line": "go"})]),
        fake_openai.text("Deployed and logged."),
    )

    asked = tg.send(group_chat(GROUP_ID, "Ops"), MARCO, "@hermes_test_bot deploy and log it")
    [card] = wait(lambda: tg.bot_messages(OLIVIA["id"]), 60, "Olivia's card")
    [notice] = wait(lambda: tg.bot_messages(GROUP_ID), 30, "the group's notice")
    assert "Tool: append_line on server probe" in final_text(card)
    assert '"line": "go"' in final_text(card)
    assert "waits for a decider" in final_text(notice) and '"go"' not in final_text(notice)
    assert notice.reply_to == asked["message"]["message_id"] and not notice.reply_markup
    assert tg.bot_messages(MARCO["id"]) == []  # a member gets no card
    turn = Turn.objects.get(chat=group)
    assert turn.status == Turn.Status.WAITING and not log.exists()
    # The reply waits with its turn: open, nothing sent for it yet.
    reply = OutboundMessage.objects.get(kind="reply", turn=turn)
    assert reply.status in OutboundMessage.OPEN and reply.message_ids == []

    approve = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
    tg.press(OLIVIA, card, approve)
    wait(replies_done(1), 60, "the reply after the approval")
    answers = [call.params.get("text") for call in tg.calls_of("answerCallbackQuery")]
    assert answers == ["Call approved: probe__append_line."]
    wait(lambda: tg.bot_messages(OLIVIA["id"])[0].edits == 1, 30, "the card's outcome")
    decided = tg.bot_messages(OLIVIA["id"])[0]
    assert "✅ Approved by olivia: the call runs now." in final_text(decided)
    assert not decided.reply_markup
    wait(lambda: len(tg.bot_messages(GROUP_ID)) == 3, 30, "the group's messages")
    in_group = [final_text(m) for m in tg.bot_messages(GROUP_ID)]
    assert in_group[1:] == [
        "✅ The call of probe__append_line was approved by olivia.",
        "Deployed and logged.",
    ]  # the answer once, after who decided
    assert log.read_text().splitlines() == ["go"]
    assert ToolApproval.objects.get(turn=turn).decided_via == "telegram"
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.COMPLETED
    # Telegram accepted every message and answer (an edit to the same text is "not modified").
    sent = [c for c in tg.calls if c.method in ("sendMessage", "answerCallbackQuery")]
    assert all(call.status == 200 for call in sent)
