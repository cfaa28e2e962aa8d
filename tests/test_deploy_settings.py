"""Production settings: `manage.py check --deploy` is clean for a production environment, and
the same code stays usable over plain HTTP on 127.0.0.1 (`make run`, the tests)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

BASE_DIR = Path(__file__).resolve().parent.parent


def deploy_check(tmp_path, **env) -> subprocess.CompletedProcess:
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SECURE_", "SESSION_", "CSRF_", "HTTPS", "ALLOWED_", "DEBUG"))
    }
    clean.update(
        {
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "HERMES_VAR_DIR": str(tmp_path),
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def manage(var_dir, *args, **env) -> subprocess.CompletedProcess:
    """`manage.py ARGS` as a second terminal runs it: DEBUG off, no SECRET_KEY in the
    environment, the var/ directory at `var_dir`."""
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    clean.update({"DEBUG": "false", "HERMES_VAR_DIR": str(var_dir), **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


PRINT_KEY = (
    "shell",
    "--no-imports",
    "-c",
    "from django.conf import settings; print(settings.SECRET_KEY)",
)


def test_manage_py_uses_the_key_make_run_generated(tmp_path):
    key = secrets.token_urlsafe(50)
    (tmp_path / "secret_key").write_text(key + "\n")

    checked = manage(tmp_path, "check")
    assert checked.returncode == 0, checked.stderr
    printed = manage(tmp_path, *PRINT_KEY)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == key


def test_a_key_set_in_the_environment_wins_over_the_file(tmp_path):
    (tmp_path / "secret_key").write_text(secrets.token_urlsafe(50))

    printed = manage(tmp_path, *PRINT_KEY, SECRET_KEY="from-the-environment")
    assert printed.stdout.strip() == "from-the-environment", printed.stderr


def test_without_any_key_production_refuses_and_manage_py_makes_none(tmp_path):
    result = manage(tmp_path, "check")

    assert result.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in result.stderr
    assert not (tmp_path / "secret_key").exists()


def test_an_empty_key_file_counts_as_no_key(tmp_path):
    (tmp_path / "secret_key").write_text("\n")

    result = manage(tmp_path, "check")
    assert result.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in result.stderr


def test_check_deploy_is_clean_for_a_production_environment(tmp_path):
    result = deploy_check(tmp_path, ALLOWED_HOSTS="hub.example.com")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_is_clean_behind_a_tls_proxy(tmp_path):
    result = deploy_check(
        tmp_path,
        ALLOWED_HOSTS="hub.example.com",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto",
        TRUSTED_PROXY_COUNT="1",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_deploy_flags_a_public_host_served_without_https(tmp_path):
    result = deploy_check(tmp_path, ALLOWED_HOSTS="hub.example.com", HTTPS="false")
    assert result.returncode != 0
    assert "SECURE_SSL_REDIRECT" in result.stderr + result.stdout


@pytest.mark.django_db
def test_pages_carry_a_strict_content_security_policy_and_work_over_http():
    response = Client().get("/accounts/login/")
    assert response.status_code == 200  # no redirect to https on 127.0.0.1
    policy = response["Content-Security-Policy"]
    directives = dict(
        (part.split()[0], part.split()[1:]) for part in policy.split(";") if part.strip()
    )
    assert directives["default-src"] == ["'self'"]
    assert directives["script-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"


PROBE = """
import django, json
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
out = {}
for name, headers in [("plain", {}), ("proxied", {"X-Forwarded-Proto": "https"})]:
    response = Client(HTTP_HOST="hub.example.com").get("/accounts/login/", headers=headers)
    cookie = response.cookies.get("csrftoken")
    out[name] = {
        "status": response.status_code,
        "location": response.get("Location", ""),
        "hsts": response.get("Strict-Transport-Security", ""),
        "secure_cookie": bool(cookie and cookie["secure"]),
    }
print(json.dumps(out))
"""


def probe_requests(tmp_path, **env) -> dict:
    import json

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "HTTPS"))}
    clean.update(
        {
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "HERMES_VAR_DIR": str(tmp_path),
            "ALLOWED_HOSTS": "hub.example.com",
            "DJANGO_SETTINGS_MODULE": "hermes_site.settings",
            **env,
        }
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=BASE_DIR,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_behind_a_tls_proxy_its_header_marks_requests_secure(tmp_path):
    # The migrations are not needed: the login page reads no table.
    seen = probe_requests(tmp_path, SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert seen["plain"]["status"] == 301
    assert seen["plain"]["location"] == "https://hub.example.com/accounts/login/"
    assert seen["proxied"]["status"] == 200
    assert seen["proxied"]["hsts"].startswith("max-age=31536000")
    assert seen["proxied"]["secure_cookie"]


def test_without_a_trusted_proxy_the_header_is_ignored(tmp_path):
    seen = probe_requests(tmp_path)
    assert seen["proxied"]["status"] == 301  # a client cannot claim https itself
