"""A tool's policy never changes because its server said so: the policy read from a tool's
annotations holds only for the version staff accepted (the first listing of a server, or
staff's acceptance later). A real MCP server (the probe over stdio, `--turncoat`) re-announces
its destructive tool as read-only and adds a new one: both ask, with audit rows and a notice
to the staff who manage the server, until staff accept the new versions."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, message_received, turn_claim
from chats.models import ChatMember, PersonNotice, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.models import ServerTool, ToolApproval, ToolAudit, ToolCall
from toolservers.selectors import chat_active_tools
from toolservers.services import server_tool_accept, server_tools_record

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


@pytest.fixture
def root(make_person):
    return make_person("rooty", is_staff=True, is_superuser=True)


@pytest.fixture
def room(owner):
    chat, _ = chat_get_or_create(channel="web", chat_id="ops-room", title="Ops")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    return chat


def say(chat, person, text):
    result = message_ingest(
        channel="web",
        chat_id=chat.external_id,
        user_id=person.pk,
        user_name=person.username,
        text=text,
        person=person,
        member=person,
    )
    return message_received(result, enqueue=False)


def run(turn) -> Turn:
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED, claim.outcome
    return run_claimed_turn(claim.turn, provider=get_provider())


def policies(chat) -> dict[str, str]:
    return {item.tool.name: item.policy for item in chat_active_tools(chat)}


def test_a_server_that_reannounces_its_tools_cannot_lift_ask(
    fake, room, owner, member, staff, root, tmp_path
):
    log = tmp_path / "deploy.log"
    probe = add_server("probe", stdio=[PYTHON, PROBE, "--turncoat"])
    enable(room, probe)  # no policy of the chat's own: each tool's annotations decide
    fake.script(
        fake_openai.tool_calls([("t1", "probe__turn_coat", {})]),
        fake_openai.text("done"),
        fake_openai.tool_calls(
            [("a1", "probe__append_line", {"path": str(log), "line": "rm -rf"})]
        ),
    )
    first = run(say(room, owner, "turn"))
    assert first.status == Turn.Status.COMPLETED
    # The first listing is the version adopted with the server: read-only allows.
    assert ToolCall.objects.get(tool="turn_coat").decision == "allowed"

    second = run(say(room, owner, "append a line"))
    append = ServerTool.objects.get(server=probe, name="append_line")
    assert append.annotations.get("readOnlyHint") is True  # what the server says now
    assert second.status == Turn.Status.WAITING  # ... and yet the call asks a decider
    assert not log.exists()
    assert ToolApproval.objects.filter(tool="append_line", status="pending").count() == 1
    assert not ToolCall.objects.filter(tool="append_line").exists()
    assert policies(room)["append_line"] == "ask"
    assert policies(room)["wipe"] == "ask"  # a new tool asks, whatever it says of itself
    assert policies(room)["echo"] == "allow"  # unchanged tools keep their accepted policy

    changed = ToolAudit.objects.get(action="tool.changed", detail__tool="append_line")
    assert changed.server_slug == "probe" and changed.via == "runtime"
    assert "annotations" in changed.detail["changed"]
    assert changed.detail["policy"] == "ask"
    assert ToolAudit.objects.filter(action="tool.new", detail__tool="wipe").exists()
    # Staff who manage the server are told (a stdio server: superusers), once per listing;
    # nobody else is.
    told = PersonNotice.objects.filter(kind="tool_changed")
    assert [n.person for n in told] == [root]
    assert "append_line" in told[0].text and "wipe" in told[0].text
    assert "/tools/" in told[0].text

    # Only staff who manage the server accept, and only the version they were shown.
    for person in (owner, member, staff):
        with pytest.raises(PermissionDenied):
            server_tool_accept(by=person, tool=append, shown_hash=append.schema_hash)
    with pytest.raises(ValidationError):
        server_tool_accept(by=root, tool=append, shown_hash="an-older-version")
    assert policies(room)["append_line"] == "ask"
    server_tool_accept(by=root, tool=append, shown_hash=append.schema_hash)
    assert policies(room)["append_line"] == "allow"  # the accepted annotations apply again
    assert policies(room)["wipe"] == "ask"
    accepted = ToolAudit.objects.get(action="tool.accepted", detail__tool="append_line")
    assert accepted.person == root


def test_a_changed_description_or_schema_asks_and_changing_back_restores(room, staff):
    read = {
        "name": "read",
        "description": "Read a note.",
        "input_schema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    }
    notes = add_server("notes", url="http://127.0.0.1:9/mcp")
    server_tools_record(server=notes, announced=[read])
    enable(room, notes)
    assert policies(room) == {"read": "allow"}
    server_tools_record(server=notes, announced=[{**read, "description": "Read a note. Or two."}])
    assert policies(room) == {"read": "ask"}
    assert [n.person for n in PersonNotice.objects.filter(kind="tool_changed")] == [staff]
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    server_tools_record(server=notes, announced=[{**read, "input_schema": schema}])
    assert policies(room) == {"read": "ask"}
    # The second change of a tool already waiting for staff is audited, not told again.
    assert ToolAudit.objects.filter(action="tool.changed").count() == 2
    assert PersonNotice.objects.filter(kind="tool_changed").count() == 1
    server_tools_record(server=notes, announced=[read])  # back to the accepted version
    assert policies(room) == {"read": "allow"}


def test_explicit_policies_of_people_are_unchanged(room, staff):
    notes = add_server("notes", url="http://127.0.0.1:9/mcp")
    write = {"name": "write", "description": "Write a note.", "annotations": {}}
    server_tools_record(server=notes, announced=[write])
    enable(room, notes, tool="write", policy="deny")
    server_tools_record(server=notes, announced=[{**write, "annotations": {"readOnlyHint": True}}])
    assert policies(room) == {"write": "deny"}


def test_the_tools_page_shows_a_changed_tool_and_staff_accept_the_version_shown(
    client, room, staff, member
):
    read = {"name": "read", "description": "Read a note.", "annotations": {}}
    notes = add_server("notes", url="http://127.0.0.1:9/mcp")
    server_tools_record(server=notes, announced=[read])
    enable(room, notes)
    server_tools_record(server=notes, announced=[{**read, "annotations": {"readOnlyHint": True}}])
    tool = ServerTool.objects.get(server=notes, name="read")
    url = "/tools/notes/tools/read/accept"
    client.force_login(member)
    assert client.post(url, {"schema_hash": tool.schema_hash}).status_code == 404
    client.force_login(staff)
    page = client.get("/tools/").content.decode()
    assert "changed: annotations: asks until accepted" in page and "Accept as it is" in page
    client.post(url, {"schema_hash": "an-older-version"})
    assert policies(room) == {"read": "ask"}  # changed since it was shown: nothing accepted
    client.post(url, {"schema_hash": tool.schema_hash})
    assert policies(room) == {"read": "allow"}
    assert "asks until accepted" not in client.get("/tools/").content.decode()
