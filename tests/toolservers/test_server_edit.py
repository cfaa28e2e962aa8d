"""Editing a tool server's settings from the dashboard: staff for an HTTP server, superusers
for a stdio one; validated, audited, and a stored literal env or header value never shown."""

import pytest
from django.core.exceptions import PermissionDenied

from chats.services import message_ingest
from tests.toolservers.conftest import add_server, enable
from toolservers.models import ToolAudit, ToolServer
from toolservers.selectors import chat_active_tools
from toolservers.services import server_tools_record, server_update

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

READ = {"name": "read", "description": "Read a note.", "annotations": {"readOnlyHint": True}}
WRITE = {"name": "write", "description": "Write a note.", "annotations": {}}


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


@pytest.fixture
def root(make_person):
    return make_person("rooty", is_staff=True, is_superuser=True)


@pytest.fixture
def notes():
    server = add_server(
        "notes",
        url="http://127.0.0.1:9/mcp",
        headers={"X-Team": "pasted-secret-value", "Authorization": {"env": "HUB_TOOL_NOTES_TOKEN"}},
    )
    server_tools_record(server=server, announced=[READ, WRITE])
    return server


@pytest.fixture
def local():
    return add_server(
        "local",
        stdio=["python", "-m", "some_server"],
        env={"API_KEY": "literal-key-123", "TOKEN": {"env": "HUB_TOOL_LOCAL_TOKEN"}},
    )


def _form(**overrides) -> dict:
    data = {
        "enabled": "on",
        "default_policy": "",
        "call_timeout_seconds": "30",
        "tool_allow": "",
        "tool_deny": "",
        "url": "http://127.0.0.1:9/mcp",
        "headers": "X-Team=<kept>\nAuthorization=@HUB_TOOL_NOTES_TOKEN",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}


def test_staff_edit_an_http_server_and_every_change_is_audited(client, staff, notes):
    client.force_login(staff)
    page = client.get("/tools/notes/edit").content.decode()
    assert "Authorization=@HUB_TOOL_NOTES_TOKEN" in page and "X-Team=&lt;kept&gt;" in page
    assert "pasted-secret-value" not in page  # a stored literal is never shown back
    response = client.post(
        "/tools/notes/edit",
        _form(
            call_timeout_seconds="12.5",
            tool_deny="write",
            default_policy="ask",
            headers="X-Team=<kept>\nAuthorization=@HUB_TOOL_OTHER_TOKEN",
        ),
    )
    assert response.status_code == 302
    notes.refresh_from_db()
    assert notes.call_timeout_seconds == 12.5 and notes.tool_deny == ["write"]
    assert notes.default_policy == "ask"  # a new URL: tests/toolservers/test_references.py
    assert notes.headers == {
        "X-Team": "pasted-secret-value",
        "Authorization": {"env": "HUB_TOOL_OTHER_TOKEN"},
    }
    audit = ToolAudit.objects.get(action="server.edit")
    assert audit.person == staff
    assert audit.detail["headers"] == ["Authorization", "X-Team"]  # names, never values
    assert "pasted-secret-value" not in str(audit.detail)
    # The deny list takes effect in every chat.
    chat = message_ingest(channel="api", chat_id="c", user_id="u", text="hi").chat
    enable(chat, notes)
    assert [a.tool.name for a in chat_active_tools(chat)] == ["read"]


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("headers", "Authorization=@SECRET_KEY", "never given to a server"),
        ("headers", "just-a-word", "write NAME=value"),
        ("headers", "X-New=<kept>", "no stored value to keep"),
        ("call_timeout_seconds", "0", "greater than or equal to 0.1"),
        ("call_timeout_seconds", "soon", "Enter a number"),
        ("url", "ftp://example.org/mcp", "http:// or https://"),
        ("default_policy", "maybe", "Select a valid choice"),
    ],
)
def test_bad_values_are_refused_with_a_clear_error_and_nothing_changes(
    client, staff, notes, field, value, error
):
    before = ToolServer.objects.filter(pk=notes.pk).values().get()
    client.force_login(staff)
    response = client.post("/tools/notes/edit", _form(**{field: value}))
    assert response.status_code == 400
    assert error in response.content.decode()
    assert ToolServer.objects.filter(pk=notes.pk).values().get() == before
    assert not ToolAudit.objects.filter(action="server.edit").exists()


def test_a_superuser_edits_a_stdio_servers_command_and_environment(client, root, local):
    client.force_login(root)
    page = client.get("/tools/local/edit").content.decode()
    assert "literal-key-123" not in page and "API_KEY=&lt;kept&gt;" in page
    form = {
        "enabled": "on",
        "call_timeout_seconds": "5",
        "command_line": "python -m other_server --flag 'two words'",
        "cwd": "/tmp",
        "env": "API_KEY=<kept>\nREGION=eu",
    }
    response = client.post("/tools/local/edit", form)
    assert response.status_code == 400  # a kept value never follows a new command line
    assert "not sent to a new address or command" in response.content.decode()
    response = client.post("/tools/local/edit", form | {"env": "API_KEY=typed-again\nREGION=eu"})
    assert response.status_code == 302
    local.refresh_from_db()
    assert (local.command, local.args) == ("python", ["-m", "other_server", "--flag", "two words"])
    assert local.env == {"API_KEY": "typed-again", "REGION": "eu"}  # TOKEN dropped
    assert local.cwd == "/tmp" and local.call_timeout_seconds == 5


def test_others_are_refused_and_nothing_changes(client, make_person, staff, notes, local):
    before = list(ToolServer.objects.values())
    # Anonymous: sent to the login page.
    for slug in ("notes", "local"):
        response = client.post(f"/tools/{slug}/edit", _form(call_timeout_seconds="1"))
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    # A signed-in person who is not staff: the page does not exist for them.
    client.force_login(make_person("mia"))
    assert client.get("/tools/notes/edit").status_code == 404
    assert client.post("/tools/notes/edit", _form(call_timeout_seconds="1")).status_code == 404
    # Staff who are not superusers: a stdio server (a process on this machine) is refused.
    client.force_login(staff)
    assert client.get("/tools/local/edit").status_code == 403
    stdio_form = {"call_timeout_seconds": "1", "command_line": "sh -c 'id'", "env": ""}
    assert client.post("/tools/local/edit", stdio_form).status_code == 403
    assert list(ToolServer.objects.values()) == before
    with pytest.raises(PermissionDenied):
        server_update(by=staff, server=local, command="sh")
    with pytest.raises(PermissionDenied):
        server_update(by=make_person("max"), server=notes, call_timeout_seconds=1)
    assert not ToolAudit.objects.filter(action="server.edit").exists()
