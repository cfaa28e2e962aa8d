"""Which of the hub's environment variables a tool server may be given by reference (`@NAME`
in its headers or environment): only names on the operator's allow-list
(`TOOLSERVERS_ENV_REFERENCES`, default `HUB_TOOL_*`), never the hub's own configuration, for
staff and superusers alike, checked when saved and again when the connection opens. Moving a
server (a new URL, or a new command line) clears its kept values and asks for its references
to be confirmed again."""

import pytest
from django.core.exceptions import ValidationError

from tests.toolservers.conftest import add_server
from toolservers.models import ToolAudit, ToolServer
from toolservers.provider import refresh_server_tools
from toolservers.runtime import ServerSpec, ToolServerError
from toolservers.services import server_add, server_update

pytestmark = [pytest.mark.django_db]

HUB_OWN = ("METRICS_TOKEN", "SECRET_KEY", "LLM_API_KEY", "TELEGRAM_WEBHOOK_SECRET")


@pytest.fixture
def staff(make_person):
    return make_person("stella", is_staff=True)


@pytest.fixture
def root(make_person):
    return make_person("rooty", is_staff=True, is_superuser=True)


@pytest.fixture
def notes():
    return add_server(
        "notes",
        url="http://127.0.0.1:9/mcp",
        headers={"X-Team": "pasted-secret", "Authorization": {"env": "HUB_TOOL_NOTES_TOKEN"}},
    )


def _add_form(**overrides) -> dict:
    data = {
        "slug": "exfil",
        "enabled": "on",
        "default_policy": "",
        "call_timeout_seconds": "30",
        "url": "https://collector.example/mcp",
        "headers": "",
    }
    return data | overrides


@pytest.mark.parametrize("name", [*HUB_OWN, "GITHUB_TOKEN", "HOME"])
def test_staff_are_refused_names_off_the_allow_list(client, staff, name):
    client.force_login(staff)
    response = client.post("/tools/add/http", _add_form(headers=f"Authorization=@{name}"))
    assert response.status_code == 400
    assert "TOOLSERVERS_ENV_REFERENCES" in response.content.decode()
    assert not ToolServer.objects.exists()


@pytest.mark.parametrize("name", HUB_OWN)
def test_an_edit_cannot_add_a_hub_variable_either(staff, notes, name):
    with pytest.raises(ValidationError):
        server_update(by=staff, server=notes, headers={"X-Leak": {"env": name}})
    notes.refresh_from_db()
    assert "X-Leak" not in notes.headers


def test_superusers_and_the_operator_follow_the_same_list(root):
    for by, via in ((root, "dashboard"), (None, "command")):
        with pytest.raises(ValidationError, match="TOOLSERVERS_ENV_REFERENCES"):
            server_add(
                by=by,
                via=via,
                slug="local",
                transport="stdio",
                command="python",
                env={"TOKEN": {"env": "METRICS_TOKEN"}},
            )
    allowed = server_add(
        by=root,
        slug="local",
        transport="stdio",
        command="python",
        env={"TOKEN": {"env": "HUB_TOOL_LOCAL"}},
    )
    assert allowed.env == {"TOKEN": {"env": "HUB_TOOL_LOCAL"}}


def test_the_operator_sets_the_list_and_the_hubs_own_names_stay_refused(settings, staff):
    settings.TOOLSERVERS_ENV_REFERENCES = ["GITHUB_TOKEN", "ACME_*"]
    server = server_add(
        by=staff,
        slug="gh",
        transport="http",
        url="https://gh.example/mcp",
        headers={"A": {"env": "GITHUB_TOKEN"}, "B": {"env": "ACME_KEY"}},
    )
    assert set(server.headers) == {"A", "B"}
    with pytest.raises(ValidationError):  # no longer on the list
        server_update(by=staff, server=server, headers={"C": {"env": "HUB_TOOL_X"}})
    settings.TOOLSERVERS_ENV_REFERENCES = ["*"]  # everything: but never the hub's own
    for name in HUB_OWN:
        with pytest.raises(ValidationError):
            server_update(by=staff, server=server, headers={"C": {"env": name}})
    settings.TOOLSERVERS_ENV_REFERENCES = []  # nothing at all
    with pytest.raises(ValidationError):
        server_update(by=staff, server=server, headers={"C": {"env": "GITHUB_TOKEN"}})


def test_a_stored_reference_off_the_list_is_not_resolved(monkeypatch, notes):
    monkeypatch.setenv("METRICS_TOKEN", "the-metrics-token")
    # A row saved before the list existed (or before the operator narrowed it).
    ToolServer.objects.filter(pk=notes.pk).update(headers={"X": {"env": "METRICS_TOKEN"}})
    notes.refresh_from_db()
    with pytest.raises(ToolServerError, match="never given to a server") as refused:
        ServerSpec.from_server(notes)
    assert "the-metrics-token" not in str(refused.value)


@pytest.mark.django_db(transaction=True)
def test_an_allowed_reference_reaches_a_real_server(monkeypatch, http_probe, staff):
    monkeypatch.setenv("HUB_TOOL_PROBE_TOKEN", "probe-token-value")
    server = server_add(
        by=staff,
        slug="web",
        transport="http",
        url=http_probe,
        headers={"Authorization": {"env": "HUB_TOOL_PROBE_TOKEN"}},
    )
    assert dict(ServerSpec.from_server(server).headers) == {"Authorization": "probe-token-value"}
    assert "echo" in {tool.name for tool in refresh_server_tools(server)}


def test_a_new_url_clears_kept_values_and_asks_to_confirm_references(staff, notes):
    before = ToolServer.objects.filter(pk=notes.pk).values().get()
    with pytest.raises(ValidationError, match="HUB_TOOL_NOTES_TOKEN"):
        server_update(by=staff, server=notes, url="https://elsewhere.example/mcp")
    assert ToolServer.objects.filter(pk=notes.pk).values().get() == before
    server_update(
        by=staff, server=notes, url="https://elsewhere.example/mcp", references_confirmed=True
    )
    notes.refresh_from_db()
    assert notes.url == "https://elsewhere.example/mcp"
    assert notes.headers == {"Authorization": {"env": "HUB_TOOL_NOTES_TOKEN"}}  # literal gone
    audit = ToolAudit.objects.get(action="server.edit")
    assert audit.detail["cleared"] == ["X-Team"]
    assert audit.detail["references_confirmed"] == ["HUB_TOOL_NOTES_TOKEN"]
    assert "pasted-secret" not in str(audit.detail)


def test_the_edit_form_never_carries_a_kept_value_to_a_new_url(client, staff, notes):
    client.force_login(staff)
    form = {
        "enabled": "on",
        "default_policy": "",
        "call_timeout_seconds": "30",
        "url": "https://elsewhere.example/mcp",
        "headers": "X-Team=<kept>\nAuthorization=@HUB_TOOL_NOTES_TOKEN",
    }
    response = client.post("/tools/notes/edit", form)
    assert response.status_code == 400
    assert "not sent to a new address" in response.content.decode()
    form["headers"] = "Authorization=@HUB_TOOL_NOTES_TOKEN"
    response = client.post("/tools/notes/edit", form)
    assert response.status_code == 400
    assert "confirm" in response.content.decode()
    response = client.post("/tools/notes/edit", form | {"confirm_references": "on"})
    assert response.status_code == 302
    notes.refresh_from_db()
    assert notes.headers == {"Authorization": {"env": "HUB_TOOL_NOTES_TOKEN"}}
    # The same URL keeps what is kept, with nothing to confirm.
    form["headers"] = "X-Team=new-value\nAuthorization=@HUB_TOOL_NOTES_TOKEN"
    assert client.post("/tools/notes/edit", form).status_code == 302
    form["headers"] = "X-Team=<kept>\nAuthorization=@HUB_TOOL_NOTES_TOKEN"
    assert client.post("/tools/notes/edit", form).status_code == 302
    notes.refresh_from_db()
    assert notes.headers["X-Team"] == "new-value"


def test_a_new_command_line_clears_a_stdio_servers_kept_environment(root):
    local = add_server(
        "local",
        stdio=["python", "-m", "some_server"],
        env={"API_KEY": "literal-key", "TOKEN": {"env": "HUB_TOOL_LOCAL"}},
    )
    with pytest.raises(ValidationError):
        server_update(by=root, server=local, args=["-m", "other_server"])
    server_update(by=root, server=local, args=["-m", "other_server"], references_confirmed=True)
    local.refresh_from_db()
    assert local.env == {"TOKEN": {"env": "HUB_TOOL_LOCAL"}}
    server_update(by=root, server=local, call_timeout_seconds=5)  # not a move: nothing asked
