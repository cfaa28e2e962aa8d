"""Stdio servers in the bubblewrap sandbox, against the real probe server: what the child
can and cannot see with the sandbox on, and that without it the docs' warning holds."""

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.toolservers.conftest import PROBE, PYTHON
from toolservers import sandbox
from toolservers.runtime import ServerSpec, ToolServerError, runtime

# CI installs bubblewrap (.ci/run) and fails loudly without it; elsewhere these are skipped.
pytestmark = pytest.mark.skipif(
    sandbox.usable_flags() is None and not os.environ.get("CI"),
    reason="bubblewrap is required (apt-get install bubblewrap)",
)


def _text(result) -> str:
    return "".join(item.text for item in result.content if item.type == "text")


def _probe(slug: str, *args: str, **extra) -> ServerSpec:
    return ServerSpec(slug=slug, transport="stdio", command=PYTHON, args=(PROBE, *args), **extra)


@pytest.fixture
def hub_files():
    """The hub's own secret files as they are on a real install: `.env` and the secret key
    (written for the test where this checkout has none), and the SQLite database."""
    made, files = [], {}
    for path, text in (
        (Path(settings.BASE_DIR) / ".env", "SANDBOX_SENTINEL=env-file-secret\n"),
        (Path(settings.SECRET_KEY_FILE), "sandbox-sentinel-secret-key"),
    ):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            made.append(path)
        files[str(path)] = path.read_bytes()[:200]
    yield files
    for path in made:
        path.unlink()


def _read(spec: ServerSpec, path: str) -> str:
    return _text(runtime.call_tool(spec, "read_file", {"path": path}))


@pytest.mark.django_db
def test_a_sandboxed_child_sees_none_of_the_hubs_secrets_and_still_works(settings, hub_files):
    settings.TOOLSERVERS_SANDBOX = "bwrap"
    spec = _probe("sandboxed")
    assert _text(runtime.call_tool(spec, "echo", {"text": "inside"})) == "echo: inside"
    environ = _read(spec, f"/proc/{os.getpid()}/environ")
    assert environ.startswith("unreadable"), "the child read the hub's environment"
    for path in hub_files:
        assert _read(spec, path).startswith("unreadable"), f"the child read {path}"
    if connection.vendor == "sqlite":
        database = connection.settings_dict["NAME"]
        assert Path(database).exists()
        assert _read(spec, database).startswith("unreadable"), "the child read the database"
    # Its own pid namespace: the hub is no process it can see.
    assert _read(spec, f"/proc/{os.getpid()}/cmdline").startswith("unreadable") or (
        "pytest" not in _read(spec, f"/proc/{os.getpid()}/cmdline")
    )


@pytest.mark.django_db
def test_without_the_sandbox_the_child_reads_what_the_hubs_user_can(settings, hub_files):
    """What docs/SECURITY.md says holds with TOOLSERVERS_SANDBOX=off."""
    settings.TOOLSERVERS_SANDBOX = "off"
    spec = _probe("unsandboxed")
    assert "PATH=" in _read(spec, f"/proc/{os.getpid()}/environ")
    for path, start in hub_files.items():
        assert _read(spec, path).encode().startswith(b"read: " + start[:20]), path


def test_a_folder_named_in_the_arguments_is_shown_read_write_and_tmp_is_private(settings, tmp_path):
    settings.TOOLSERVERS_SANDBOX = "bwrap"
    root = tmp_path / "notes"
    root.mkdir()
    (root / "kept.txt").write_text("a note")
    (tmp_path / "beside.txt").write_text("not named")
    spec = _probe("sandbox-root", str(root))
    assert _read(spec, str(root / "kept.txt")) == "read: a note"
    runtime.call_tool(spec, "append_line", {"path": str(root / "new.txt"), "line": "written"})
    assert (root / "new.txt").read_text() == "written\n"
    assert _read(spec, str(tmp_path / "beside.txt")).startswith("unreadable")


def test_a_configured_path_that_would_show_the_hubs_files_is_refused(settings):
    settings.TOOLSERVERS_SANDBOX = "bwrap"
    for path in (str(settings.BASE_DIR), str(settings.VAR_DIR), "/"):
        spec = _probe(f"sandbox-refused-{len(path)}", f"--root={path}")
        with pytest.raises(ToolServerError, match="sandbox does not show .*hub's own files"):
            runtime.list_tools(spec)


def test_a_required_sandbox_that_cannot_run_refuses_to_start_the_server(settings, monkeypatch):
    settings.TOOLSERVERS_SANDBOX = "bwrap"
    monkeypatch.setattr(sandbox, "usable_flags", lambda: None)
    with pytest.raises(ToolServerError, match="TOOLSERVERS_SANDBOX=bwrap but bubblewrap"):
        runtime.list_tools(_probe("sandbox-missing"))


def test_auto_runs_unsandboxed_where_bwrap_cannot_run(settings, monkeypatch):
    settings.TOOLSERVERS_SANDBOX = "auto"
    monkeypatch.setattr(sandbox, "usable_flags", lambda: None)
    spec = _probe("sandbox-auto-off")
    assert "PATH=" in _read(spec, f"/proc/{os.getpid()}/environ")


def test_a_real_pypi_server_runs_in_the_sandbox(settings):
    settings.TOOLSERVERS_SANDBOX = "bwrap"
    command = str(Path(PYTHON).parent / "mcp-server-time")  # the dev extra's console script
    spec = ServerSpec(slug="time-sandboxed", transport="stdio", command=command)
    result = runtime.call_tool(spec, "get_current_time", {"timezone": "Europe/Paris"})
    assert "Europe/Paris" in _text(result)


def test_the_working_folder_is_shown_and_the_child_starts_there(settings, tmp_path):
    settings.TOOLSERVERS_SANDBOX = "bwrap"
    (tmp_path / "data.txt").write_text("from the working folder")
    spec = _probe("sandbox-cwd", cwd=str(tmp_path))
    assert _read(spec, "data.txt") == "read: from the working folder"
