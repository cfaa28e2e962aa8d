"""The table of request body limits the web server checks (hermes_site/body_limits.py)."""

import pytest

from hermes_site import body_limits
from hermes_site.body_limits import body_limit_for, body_limit_register, request_path


@pytest.fixture(autouse=True)
def _no_registered_limits(monkeypatch):
    monkeypatch.setattr(body_limits, "_registered", {})


def test_api_paths_get_their_own_limits_and_other_paths_the_default(settings):
    settings.API_MAX_BODY_BYTES = 1000
    settings.OPENAI_API_MAX_BODY_BYTES = 4000
    settings.REQUEST_BODY_LIMITS = {"/api/v1/": 1000, "/v1/": 4000}
    settings.HTTP_MAX_BODY_BYTES = 2000

    assert body_limit_for("/api/v1/messages") == 1000
    assert body_limit_for("/v1/chat/completions") == 4000
    assert body_limit_for("/accounts/login/") == 2000
    assert body_limit_for("/v1") == 2000  # not under /v1/
    assert body_limit_for("/api/v1x/") == 2000


def test_an_app_registers_a_larger_limit_for_its_prefix_and_the_longest_prefix_wins(settings):
    settings.REQUEST_BODY_LIMITS = {"/api/v1/": 1000}
    settings.HTTP_MAX_BODY_BYTES = 2000
    body_limit_register("/files/upload/", 50_000_000)
    body_limit_register("/api/v1/files/", 30_000_000)

    assert body_limit_for("/files/upload/report.pdf") == 50_000_000
    assert body_limit_for("/api/v1/files/x") == 30_000_000
    assert body_limit_for("/api/v1/messages") == 1000
    assert body_limit_for("/files/") == 2000


def test_an_operators_setting_wins_over_a_registered_limit(settings):
    settings.REQUEST_BODY_LIMITS = {"/files/upload/": 10_000}
    body_limit_register("/files/upload/", 50_000_000)

    assert body_limit_for("/files/upload/a") == 10_000


@pytest.mark.parametrize("prefix, size", [("files/", 10), ("/files/", -1)])
def test_a_malformed_registration_is_refused(prefix, size):
    with pytest.raises(ValueError):
        body_limit_register(prefix, size)


@pytest.mark.parametrize(
    "target, path",
    [
        (b"/api/v1/messages?x=1", "/api/v1/messages"),
        (b"/%61pi/v1/messages", "/api/v1/messages"),
        (b"http://hub.example/api/v1/messages?x", "/api/v1/messages"),
        (b"*", "*"),  # OPTIONS *: no prefix matches, the default limit applies
    ],
)
def test_the_path_is_read_as_the_application_will_see_it(target, path):
    assert request_path(target) == path
