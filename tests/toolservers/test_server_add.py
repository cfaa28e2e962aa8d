"""Adding a tool server from the dashboard: staff add HTTP servers, superusers stdio ones;
validated like the command, audited, and a team default set in the same step."""

import pytest

from toolservers.models import ToolAudit, ToolServer

pytestmark = [pytest.mark.storage, pytest.mark.django_db]


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


@pytest.fixture
def root(make_person):
    return make_person("rooty", is_staff=True, is_superuser=True)


def _form(**overrides) -> dict:
    data = {
        "slug": "notes",
        "enabled": "on",
        "default_policy": "",
        "call_timeout_seconds": "30",
        "tool_allow": "",
        "tool_deny": "",
        "url": "http://127.0.0.1:9/mcp",
        "headers": "Authorization=@HUB_TOOL_NOTES_TOKEN",
    }
    data.update(overrides)
    return data


def test_staff_add_an_http_server_with_a_referenced_secret(client, staff):
    client.force_login(staff)
    page = client.get("/tools/")
    assert b'data-add="http"' in page.content and b'data-add="stdio"' not in page.content
    assert client.get("/tools/add/http").status_code == 200
    response = client.post("/tools/add/http", _form(on_by_default="on", default_policy="ask"))
    assert response.status_code == 302
    server = ToolServer.objects.get(slug="notes")
    assert server.headers == {"Authorization": {"env": "HUB_TOOL_NOTES_TOKEN"}}
    assert (server.on_by_default, server.default_policy, server.created_by) == (True, "ask", staff)
    actions = set(ToolAudit.objects.filter(server_slug="notes").values_list("action", flat=True))
    assert "server.add" in actions


def test_bad_input_is_refused_with_a_reason_and_nothing_is_added(client, staff):
    client.force_login(staff)
    for data, reason in [
        (_form(slug="Not A Slug"), b"slug"),
        (_form(url="ftp://example.org/mcp"), b"URL"),
        (_form(headers="Authorization=@SECRET_KEY"), b"never given to a server"),
        (_form(headers="no equals sign"), b"NAME=value"),
        (_form(call_timeout_seconds="0"), b"greater than or equal"),
    ]:
        response = client.post("/tools/add/http", data)
        assert response.status_code == 400 and reason in response.content, reason
    assert not ToolServer.objects.exists()
    client.post("/tools/add/http", _form())
    again = client.post("/tools/add/http", _form())
    assert again.status_code == 400 and b"exists already" in again.content


def test_only_superusers_add_a_stdio_server(client, staff, root, member):
    client.force_login(staff)
    stdio = {**_form(slug="local"), "command_line": "python -m some_server", "env": ""}
    assert client.get("/tools/add/stdio").status_code == 403
    assert client.post("/tools/add/stdio", stdio).status_code == 403
    client.force_login(root)
    assert client.post("/tools/add/stdio", stdio).status_code == 302
    server = ToolServer.objects.get(slug="local")
    assert (server.command, server.args) == ("python", ["-m", "some_server"])
    client.force_login(member)
    assert client.get("/tools/add/http").status_code == 404
    assert client.post("/tools/add/http", _form(slug="x")).status_code == 404
    client.logout()
    assert client.get("/tools/add/http").status_code == 302  # to the login page
    assert client.get("/tools/add/nonsense").status_code == 302
    client.force_login(staff)
    assert client.get("/tools/add/nonsense").status_code == 404
    assert list(ToolServer.objects.values_list("slug", flat=True)) == ["local"]
