"""Team defaults: a server staff mark "on by default" is on in every chat that did not turn
it off, with the server's default policy where the chat sets none; nothing else is on in a
new chat. Only staff who manage the server set it, and a turn stays cheap."""

import io

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command

from chats.agent.registry import TurnContext
from chats.models import ChatMember
from chats.services import chat_member_ensure, message_ingest
from chats.slash_commands import CommandContext
from tests.toolservers.conftest import add_server, enable
from toolservers.commands import tools_command
from toolservers.models import ToolAudit
from toolservers.provider import tool_server_tools
from toolservers.selectors import (
    chat_active_tools,
    chat_may_have_tools,
    enabled_servers_for_chat,
)
from toolservers.services import server_set_default, server_tools_record, toolset_set

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

READ = {"name": "read", "description": "Read a note.", "annotations": {"readOnlyHint": True}}
WRITE = {"name": "write", "description": "Write a note.", "annotations": {}}


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


@pytest.fixture
def notes():
    server = add_server("notes", url="http://127.0.0.1:9/mcp")
    server_tools_record(server=server, announced=[READ, WRITE])
    return server


@pytest.fixture
def chat():
    return message_ingest(channel="api", chat_id="fresh", user_id="u1", text="hello").chat


def _active(chat) -> dict[str, str]:
    return {f"{a.server.slug}/{a.tool.name}": a.policy for a in chat_active_tools(chat)}


def test_nothing_is_on_in_a_new_chat_until_staff_set_a_team_default(staff, notes, chat):
    assert _active(chat) == {} and enabled_servers_for_chat(chat) == []
    server_set_default(by=staff, server=notes, on=True)
    assert _active(chat) == {"notes/read": "allow", "notes/write": "ask"}  # by annotations
    assert enabled_servers_for_chat(chat) == [notes]
    server_set_default(by=staff, server=notes, on=True, policy="deny")
    assert _active(chat) == {"notes/read": "deny", "notes/write": "deny"}
    audit = ToolAudit.objects.filter(action="server.default").first()
    assert (audit.person, audit.detail) == (staff, {"on": True, "policy": "deny"})
    server_set_default(by=staff, server=notes, on=False)
    assert _active(chat) == {}


def test_a_chat_that_turned_the_server_off_keeps_it_off(staff, notes, chat):
    server_set_default(by=staff, server=notes, on=True, policy="ask")
    toolset_set(by=staff, chat=chat, server=notes, enabled=False)
    assert _active(chat) == {} and enabled_servers_for_chat(chat) == []
    # One tool off by name; a chat's own policy wins over the server's default.
    toolset_set(by=staff, chat=chat, server=notes, enabled=True, policy="allow")
    toolset_set(by=staff, chat=chat, server=notes, tool_name="write", enabled=False)
    assert _active(chat) == {"notes/read": "allow"}
    # A disabled server is off everywhere, team default or not.
    notes.enabled = False
    notes.save()
    assert _active(chat) == {} and enabled_servers_for_chat(chat) == []


def test_the_servers_default_policy_applies_where_a_chat_sets_none(staff, notes, chat):
    enable(chat, notes)  # on here, no policy of its own
    assert _active(chat) == {"notes/read": "allow", "notes/write": "ask"}
    server_set_default(by=staff, server=notes, on=False, policy="deny")
    assert _active(chat) == {"notes/read": "deny", "notes/write": "deny"}


def test_only_staff_who_manage_the_server_set_a_team_default(make_person, notes, staff):
    member = make_person("mia")
    with pytest.raises(PermissionDenied):
        server_set_default(by=member, server=notes, on=True)
    local = add_server("local", stdio=["python", "-c", "pass"])
    with pytest.raises(PermissionDenied):  # a stdio server: superusers only
        server_set_default(by=staff, server=local, on=True)
    with pytest.raises(ValidationError):
        server_set_default(by=staff, server=notes, on=True, policy="maybe")
    notes.refresh_from_db()
    assert not notes.on_by_default and not local.on_by_default


def test_the_command_sets_and_clears_a_team_default(notes, chat):
    out = io.StringIO()
    call_command("tool_server", "default", "notes", "on", "--policy", "ask", stdout=out)
    assert "notes is a team default (ask)" in out.getvalue()
    assert _active(chat) == {"notes/read": "ask", "notes/write": "ask"}
    assert ToolAudit.objects.get(action="server.default").via == "command"
    call_command("tool_server", "list", stdout=out)
    assert "team default (ask)" in out.getvalue()
    call_command("tool_server", "default", "notes", "off", stdout=out)
    assert _active(chat) == {}


def test_the_staff_page_sets_a_team_default_and_others_cannot(client, staff, make_person, notes):
    client.force_login(make_person("mia"))
    assert client.post("/tools/notes/default", {"on": "1"}).status_code == 404
    client.force_login(staff)
    response = client.post("/tools/notes/default", {"on": "1", "policy": "ask"})
    assert response.status_code == 302
    notes.refresh_from_db()
    assert notes.on_by_default and notes.default_policy == "ask"
    assert b"Team default: on in every chat" in client.get("/tools/").content
    assert client.post("/tools/notes/default", {"on": "1", "policy": "yes"}).status_code == 400


def test_a_chat_shows_a_team_default_as_on_and_its_deciders_turn_it_off(
    client, staff, owner, notes
):
    room = message_ingest(channel="web", chat_id="room", user_id="1", text="hi").chat
    chat_member_ensure(chat=room, person=owner, role=ChatMember.Role.OWNER)
    server_set_default(by=staff, server=notes, on=True)
    client.force_login(owner)
    page = client.get(f"/chats/{room.chat_key}/tools").content.decode()
    assert "team default" in page and "on here" in page
    answer = tools_command(CommandContext(channel="web", chat=room, actor=None, person=owner))
    assert "• notes (team default, default): read (allow), write (ask)" in answer
    client.post(f"/chats/{room.chat_key}/tools/set", {"server": "notes", "enabled": "0"})
    assert _active(room) == {}
    assert "off here" in client.get(f"/chats/{room.chat_key}/tools").content.decode()


def test_a_turn_in_a_chat_with_no_settings_costs_one_small_query(
    chat, notes, django_assert_num_queries
):
    with django_assert_num_queries(1):
        assert chat_active_tools(chat) == []
    context = TurnContext(chat, chat.messages.first())
    with django_assert_num_queries(1):  # no server can be on here: nothing listed or read
        assert tool_server_tools.tools_for_turn(context) == []


def test_the_cheap_answer_follows_every_change_from_the_next_turn(staff, notes, chat):
    other = message_ingest(channel="api", chat_id="other", user_id="u1", text="hi").chat
    context = TurnContext(chat, chat.messages.first())
    assert not chat_may_have_tools(chat) and tool_server_tools.tools_for_turn(context) == []
    server_set_default(by=staff, server=notes, on=True)
    assert chat_may_have_tools(chat) and chat_may_have_tools(other)
    assert {tool.description for tool in tool_server_tools.tools_for_turn(context)} == {
        "[tool server notes] Read a note.",
        "[tool server notes] Write a note.",
    }
    server_set_default(by=staff, server=notes, on=False)
    assert not chat_may_have_tools(chat) and tool_server_tools.tools_for_turn(context) == []
    enable(chat, notes)  # this chat's own row: on here, not in the other chat
    assert chat_may_have_tools(chat) and not chat_may_have_tools(other)
    assert len(tool_server_tools.tools_for_turn(context)) == 2
    notes.enabled = False
    notes.save()
    assert not chat_may_have_tools(chat) and tool_server_tools.tools_for_turn(context) == []
