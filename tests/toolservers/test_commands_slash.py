"""`/tools` on Telegram and the terminal: anyone who may talk to the agent lists what is on;
only the chat's deciders turn servers on or off, and a refusal changes nothing."""

import io

import pytest
from django.core.management import call_command

from chats.models import ChatKind, ChatMember, Message, Turn
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from tests.bots.conftest import (
    GROUP_ID,
    fake_telegram,  # noqa: F401 (the fixtures, shared with the bot tests)
    process,
    tg,  # noqa: F401
)
from tests.fakes.telegram_server import check_html, group_chat, private_chat, tg_user
from toolservers.models import ChatToolset, ToolAudit
from toolservers.services import VIA_COMMAND, server_add, server_tools_record, toolset_set

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

ALICE = tg_user(1001, "Alice", username="alice")
BOB = tg_user(1002, "Bob")
CAROL = tg_user(1003, "Carol")

READ = {"name": "read", "description": "Read a note.", "annotations": {"readOnlyHint": True}}
WRITE = {"name": "write", "description": "Write a note.", "annotations": {}}


@pytest.fixture(autouse=True)
def access(settings, fake_telegram):  # noqa: F811
    # /tools in a group reads its administrators first: none but the bot on the fake Bot API.
    fake_telegram.set_administrators(GROUP_ID, [])
    settings.TELEGRAM_ALLOWED_USERS = ["1001", "1002", "1003"]
    settings.TELEGRAM_ALLOWED_CHATS = [str(GROUP_ID)]
    settings.TELEGRAM_GROUP_TRIGGER = "mention"


@pytest.fixture
def notes():
    server = server_add(
        by=None, via=VIA_COMMAND, slug="notes", transport="http", url="http://127.0.0.1:9/mcp"
    )
    server_tools_record(server=server, announced=[READ, WRITE])
    return server


@pytest.fixture
def group(notes, make_person):
    """The Ops group: Alice (linked) owns it, Bob (linked) is a member, Carol is unlinked."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id=str(GROUP_ID), kind=ChatKind.GROUP)
    alice = make_person("alice")
    bob = make_person("bob")
    actor_get_or_create(channel="telegram", user_id=1001, display_name="Alice", person=alice)
    actor_get_or_create(channel="telegram", user_id=1002, display_name="Bob", person=bob)
    chat_member_ensure(chat=chat, person=alice, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=bob)
    toolset_set(by=None, via=VIA_COMMAND, chat=chat, server=notes)
    return chat


@pytest.fixture
def say(tg):  # noqa: F811
    """Send `text` as `user` (in the Ops group unless told) and read the answer."""

    def send(user, text, *, chat=None):
        outcome = process(tg.message(chat or group_chat(GROUP_ID, "Ops"), user, text))
        shown = []
        for row in outcome.outbound:
            error, visible = check_html(row.payload["text"])
            assert error is None, error
            shown.append(visible)
        return "\n".join(shown)

    return send


def test_anyone_who_may_talk_here_lists_the_tools_with_their_policy(group, say):
    shown = say(CAROL, "/tools@hermes_test_bot")  # not even linked to a person
    assert "Tools on in this chat:" in shown
    assert "• notes (default): read (allow), write (ask)" in shown
    assert not Message.objects.exists() and not Turn.objects.exists()


def test_the_owner_turns_a_server_on_with_a_policy_and_off(group, notes, say):
    assert "notes is on in this chat (ask)" in say(ALICE, "/tools@hermes_test_bot on notes ask")
    assert "read (ask), write (ask)" in say(BOB, "/tools@hermes_test_bot")
    audit = ToolAudit.objects.filter(action="toolset.set").latest("id")
    assert (audit.via, audit.person.username) == ("telegram", "alice")
    assert "notes is off" in say(ALICE, "/tools@hermes_test_bot off notes")
    assert "No tool server is on" in say(BOB, "/tools@hermes_test_bot")


@pytest.mark.parametrize("user", [BOB, CAROL], ids=["member", "unlinked"])
def test_a_member_who_does_not_decide_and_an_unlinked_account_are_refused(group, user, say):
    before = list(ChatToolset.objects.values_list("enabled", "policy"))
    shown = say(user, "/tools@hermes_test_bot off notes")
    assert "Only this chat's deciders" in shown and "nothing changed" in shown
    shown = say(user, "/tools@hermes_test_bot on notes allow")
    assert "Only this chat's deciders" in shown
    assert list(ChatToolset.objects.values_list("enabled", "policy")) == before


def test_another_chats_owner_is_refused(group, make_person, say):
    dave = make_person("dave")
    actor_get_or_create(channel="telegram", user_id=1003, display_name="Carol", person=dave)
    own, _ = chat_get_or_create(channel="telegram", chat_id="1003", kind=ChatKind.DM)
    chat_member_ensure(chat=own, person=dave, role=ChatMember.Role.OWNER)
    assert "Only this chat's deciders" in say(CAROL, "/tools@hermes_test_bot off notes")
    assert ChatToolset.objects.get(chat=group).enabled
    # In their own private chat they decide.
    shown = say(CAROL, "/tools on notes", chat=private_chat(CAROL))
    assert "notes is on in this chat" in shown
    assert ChatToolset.objects.filter(chat=own, enabled=True).exists()


def test_bad_arguments_and_unknown_servers_get_a_clear_answer(group, say):
    assert say(ALICE, "/tools@hermes_test_bot on notes maybe").startswith("Usage: /tools")
    assert say(ALICE, "/tools@hermes_test_bot on nothing") == "No tool server is called “nothing”."


def test_help_and_the_menu_list_tools(group, say):
    from bots.commands import command_menu

    assert dict(command_menu())["tools"].startswith("The tool servers on here")
    assert "/tools – The tool servers on here" in say(ALICE, "/help", chat=private_chat(ALICE))


def test_terminal_one_shot_lists_and_its_own_person_decides(notes, make_person, fake_llm):
    out = io.StringIO()
    call_command("chat", "-m", "/tools", "--profile", "ops", stdout=out)
    assert "No tool server is on in this chat." in out.getvalue()
    out = io.StringIO()
    call_command("chat", "-m", "/tools on notes", "--profile", "ops", stdout=out)
    assert "Only this chat's deciders" in out.getvalue()  # a bare OS login decides nothing
    paula = make_person("paula")
    mine, _ = chat_get_or_create(channel="cli", chat_id="mine", kind=ChatKind.CLI)
    chat_member_ensure(chat=mine, person=paula)
    out = io.StringIO()
    call_command(
        "chat", "-m", "/tools on notes allow", "--profile", "mine", "--user", "paula", stdout=out
    )
    assert "notes is on in this chat (allow)" in out.getvalue()
    out = io.StringIO()
    call_command("chat", "-m", "/tools", "--profile", "mine", "--user", "paula", stdout=out)
    assert "• notes (allow): read (allow), write (allow)" in out.getvalue()
    assert not Turn.objects.exists() and fake_llm.requests == []
