"""Commands other apps register (chats.slash_commands) on Telegram: answered in private chats
and groups behind the same gates as messages, escaped and split, never stored as history."""

import pytest

from bots.commands import command_menu
from chats import slash_commands
from chats.models import ChatKind, Message, Turn
from chats.services import actor_get_or_create, chat_get_or_create
from chats.slash_commands import SlashCommand
from skills.models import Skill
from skills.reviews import skill_set_status
from skills.services import Author, skill_create
from tests.bots.conftest import GROUP_ID, process
from tests.fakes.telegram_server import (
    check_html,
    group_chat,
    private_chat,
    tg_user,
    utf16_len,
)
from tests.skills.helpers import skill_md

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

ALICE = tg_user(1001, "Alice", username="alice")
BOB = tg_user(1002, "Bob")
STRANGER = tg_user(6666, "Mallory", username="mallory")


@pytest.fixture(autouse=True)
def access(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_ALLOWED_USERS = ["1001", "1002"]
    settings.TELEGRAM_ALLOWED_CHATS = [str(GROUP_ID)]
    settings.TELEGRAM_GROUP_TRIGGER = "mention"


def texts(outcome) -> list[str]:
    """What the user reads in each message of the answer (Telegram's HTML parse must pass)."""
    shown = []
    for row in outcome.outbound:
        error, visible = check_html(row.payload["text"])
        assert error is None, error
        assert utf16_len(visible) <= 4096
        shown.append(visible)
    return shown


@pytest.fixture
def skills(make_person):
    """Two active skills, a stale one, an archived one, and a new skill waiting for review."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id="501", kind=ChatKind.DM)
    person = make_person("marco")
    actor = actor_get_or_create(channel="telegram", user_id="501", display_name="M", person=person)
    own = Author(actor=actor, person=person, chat=chat)
    for name, description, category in (
        ("deploy-staging", "How to deploy to staging <b>safely</b>.", "ops"),
        ("rotate-keys", "Rotate the API keys.", "security"),
        ("old-runbook", "The runbook before the move.", ""),
        ("retired-tool", "A tool nobody uses.", ""),
    ):
        skill_create(
            name=name,
            content=skill_md(name=name, description=description),
            author=own,
            category=category,
        )
    # Team skills, as if approved (made in Marco's DM, they would be his personal ones).
    Skill.objects.update(scope="team", owner_person=None, owner_actor=None)
    Skill.objects.filter(slug="old-runbook").update(status=Skill.Status.STALE)
    skill_set_status(name="retired-tool", archived=True, person=make_person("sam", is_staff=True))
    group, _ = chat_get_or_create(channel="telegram", chat_id="-1002", kind=ChatKind.GROUP)
    pending = skill_create(
        name="secret-plan",
        content=skill_md(name="secret-plan", description="Not approved yet."),
        author=Author(actor=actor, person=person, chat=group),
    )
    assert pending.code == "proposed"


@pytest.fixture
def probe(monkeypatch):
    """A registered command that records what it was given."""
    seen = []

    def handler(context):
        seen.append(context)
        return f"probe says <{context.args}>"

    for command in (
        SlashCommand(name="probe", help="Probe <things>", handler=handler),
        SlashCommand(name="secret", help="Private probe", handler=handler, private_only=True),
    ):
        monkeypatch.setitem(slash_commands._commands, command.name, command)
    return seen


def test_skills_lists_active_and_stale_skills_and_nothing_else(tg, skills):
    outcome = process(tg.message(private_chat(ALICE), ALICE, "/skills"))
    assert outcome.result == "command:skills"
    [shown] = texts(outcome)
    assert shown.startswith("Skills I know (3):")
    assert "• deploy-staging [ops]: How to deploy to staging <b>safely</b>." in shown
    assert "rotate-keys" in shown and "old-runbook" in shown
    assert "retired-tool" not in shown and "secret-plan" not in shown
    # Escaped, not interpreted: the description's tags are text.
    assert "&lt;b&gt;safely&lt;/b&gt;" in outcome.outbound[0].payload["text"]
    # A command is not a message: nothing in the history, no turn.
    assert not Message.objects.exists() and not Turn.objects.exists()


def test_skills_marks_stale_skills_as_the_dashboard_does(tg, skills):
    for chat in (private_chat(ALICE), group_chat(GROUP_ID, "Ops")):
        text = "/skills" if chat["type"] == "private" else "/skills@hermes_test_bot"
        [shown] = texts(process(tg.message(chat, ALICE, text)))
        assert "• old-runbook (stale): The runbook before the move." in shown
        assert "• rotate-keys [security]: Rotate the API keys." in shown  # active: no mark
        assert shown.count("(stale)") == 1


def test_skills_with_a_word_filters(tg, skills):
    [shown] = texts(process(tg.message(private_chat(ALICE), ALICE, "/skills keys")))
    assert shown.startswith("Skills I know (1):") and "rotate-keys" in shown
    [none] = texts(process(tg.message(private_chat(ALICE), ALICE, "/skills secret")))
    assert none == "No skill matches “secret”."


def test_an_unpaired_user_gets_the_pairing_answer_not_the_list(tg, skills):
    outcome = process(tg.message(private_chat(STRANGER), STRANGER, "/skills"))
    assert outcome.result == "pairing:code"
    [shown] = texts(outcome)
    assert "pairing code" in shown and "deploy-staging" not in shown


def test_in_an_allowed_group_the_answer_replies_in_place(tg, skills):
    group = group_chat(GROUP_ID, "Ops")
    update = tg.message(group, BOB, "/skills@hermes_test_bot deploy")
    outcome = process(update)
    [row] = outcome.outbound
    assert row.telegram_chat_id == GROUP_ID
    assert row.reply_to_message_id == update["message"]["message_id"]
    assert "deploy-staging" in texts(outcome)[0]
    # Addressed to another bot: not ours to answer (it is a group message like any other).
    other = process(tg.message(group, BOB, "/skills@some_other_bot"))
    assert other.outbound == [] and other.result == "stored"
    assert not Turn.objects.exists()


def test_in_a_group_the_bot_was_not_added_to_nothing_is_answered(tg, skills):
    outcome = process(tg.message(group_chat(-100555, "Strangers"), ALICE, "/skills"))
    assert outcome.result == "ignored:unknown chat" and outcome.outbound == []


def test_a_private_only_command_points_to_the_private_chat_in_groups(tg, probe):
    outcome = process(tg.message(group_chat(GROUP_ID, "Ops"), ALICE, "/secret now"))
    assert texts(outcome) == ["Ask me /secret in a private chat."]
    assert probe == []  # the handler never ran
    outcome = process(tg.message(private_chat(ALICE), ALICE, "/secret now"))
    assert texts(outcome) == ["probe says <now>"]
    assert probe[0].is_private and probe[0].args == "now"


def test_the_handler_gets_the_asker_and_only_an_active_linked_person(tg, probe, make_person):
    person = make_person("alice")
    actor_get_or_create(channel="telegram", user_id=1001, display_name="Alice", person=person)
    process(tg.message(private_chat(ALICE), ALICE, "/probe a"))
    context = probe[-1]
    assert (context.channel, context.person, context.actor.external_id) == (
        "telegram",
        person,
        "1001",
    )
    person.is_active = False
    person.save()
    process(tg.message(private_chat(ALICE), ALICE, "/probe b"))
    assert probe[-1].person is None
    group = process(tg.message(group_chat(GROUP_ID, "Ops"), BOB, "/probe c"))
    assert probe[-1].is_private is False and probe[-1].actor.external_id == "1002"
    assert group.outbound[0].telegram_chat_id == GROUP_ID


def test_a_long_answer_is_split_into_messages_telegram_accepts(tg, monkeypatch):
    line = "🚀 a line of the answer with <tags> & more, number {}\n"
    answer = "".join(line.format(i) for i in range(200))
    command = SlashCommand(name="long", help="Long", handler=lambda context: answer)
    monkeypatch.setitem(slash_commands._commands, "long", command)
    shown = texts(process(tg.message(private_chat(ALICE), ALICE, "/long")))
    assert len(shown) > 1
    assert "\n".join(shown).split("\n") == answer.rstrip("\n").split("\n")  # nothing lost

    # A flood is cut after five messages, with a note.
    answer = "".join(line.format(i) for i in range(5000))
    shown = texts(process(tg.message(private_chat(ALICE), ALICE, "/long")))
    assert len(shown) == 6 and shown[-1].startswith("… (the rest is cut")


def test_a_failing_command_answers_politely_and_the_update_is_done(tg, monkeypatch):
    def broken(context):
        raise RuntimeError("boom")

    command = SlashCommand(name="broken", help="Breaks", handler=broken)
    monkeypatch.setitem(slash_commands._commands, "broken", command)
    outcome = process(tg.message(private_chat(ALICE), ALICE, "/broken"))
    assert outcome.result == "command:broken:failed"
    assert texts(outcome) == ["/broken failed; the error is in the hub's log."]


def test_built_in_commands_win_over_registered_ones(tg, monkeypatch):
    command = SlashCommand(name="new", help="Hijack", handler=lambda context: "hijacked")
    monkeypatch.setitem(slash_commands._commands, "new", command)
    [shown] = texts(process(tg.message(private_chat(ALICE), ALICE, "/new")))
    assert shown.startswith("Fresh start")
    assert ("new", "Hijack") not in command_menu()


def test_help_start_and_the_menu_list_registered_commands(tg, monkeypatch):
    bad = SlashCommand(name="Bad-Name", help="Telegram refuses this name", handler=str)
    monkeypatch.setitem(slash_commands._commands, "Bad-Name", bad)
    [help_text] = texts(process(tg.message(private_chat(ALICE), ALICE, "/help")))
    assert "/skills – The skills I know" in help_text
    assert help_text.rstrip().endswith("/help – List the commands")
    [start] = texts(process(tg.message(private_chat(ALICE), ALICE, "/start")))
    assert "/skills" in start
    menu = dict(command_menu())
    assert menu["skills"].startswith("The skills I know") and "help" in menu
    assert "Bad-Name" not in menu
    assert not Message.objects.exists()
