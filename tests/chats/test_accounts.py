import pytest
from axes.models import AccessAttempt
from django.test import Client

pytestmark = pytest.mark.django_db


def test_log_in_change_password_log_out(owner):
    client = Client()
    assert (
        client.post(
            "/accounts/login/", {"username": "olivia", "password": "pw-olivia-123!"}
        ).status_code
        == 302
    )
    page = client.get("/").content.decode()
    assert 'href="/accounts/password/"' in page
    response = client.post(
        "/accounts/password/",
        {
            "old_password": "pw-olivia-123!",
            "new_password1": "a-new-long-passphrase-42",
            "new_password2": "a-new-long-passphrase-42",
        },
    )
    assert response.status_code == 302 and response["Location"] == "/accounts/password/done/"
    assert "Password changed" in client.get("/accounts/password/done/").content.decode()
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/").status_code == 302
    assert log_in("olivia", "a-new-long-passphrase-42")[1].status_code == 302


def test_a_wrong_old_password_changes_nothing(owner):
    client = Client()
    client.force_login(owner)
    response = client.post(
        "/accounts/password/",
        {
            "old_password": "nope",
            "new_password1": "x-long-pass-987",
            "new_password2": "x-long-pass-987",
        },
    )
    assert response.status_code == 200 and "error" in response.content.decode()
    assert log_in("olivia", "pw-olivia-123!")[1].status_code == 302


def test_anonymous_cannot_reach_the_password_page():
    response = Client().get("/accounts/password/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# --- login throttling (django-axes) ---------------------------------------------------------


def log_in(username: str, password: str, *, ip: str = "127.0.0.1", **headers):
    client = Client(REMOTE_ADDR=ip)
    response = client.post(
        "/accounts/login/", {"username": username, "password": password}, headers=headers
    )
    return client, response


@pytest.fixture(params=["database", "cache"])
def axes_handler(request, settings):
    """Failed logins counted in the database (default) or in Redis (AXES_HANDLER=cache)."""
    from axes.handlers.proxy import AxesProxyHandler

    settings.AXES_HANDLER = {
        "database": "axes.handlers.database.AxesDatabaseHandler",
        "cache": "axes.handlers.cache.AxesCacheHandler",
    }[request.param]
    AxesProxyHandler.get_implementation(force=True)
    yield request.param
    AxesProxyHandler.implementation = None


def test_repeated_wrong_passwords_lock_that_username_out_from_that_address(
    owner, member, axes_handler
):
    for attempt in range(4):
        _, response = log_in("olivia", f"guess-{attempt}")
        assert response.status_code == 200
    assert log_in("olivia", "guess-5")[1].status_code == 429  # the fifth failure locks
    assert AccessAttempt.objects.exists() == (axes_handler == "database")
    client, locked = log_in("olivia", "pw-olivia-123!")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed login attempts" in page and "olivia" in page
    assert client.get("/").status_code == 302  # not logged in
    # A forged forwarding header is not another address.
    _, forged = log_in("olivia", "pw-olivia-123!", X_Forwarded_For="203.0.113.9")
    assert forged.status_code == 429
    # Lockout is by username and address together: others are not locked out.
    assert log_in("marco", "pw-marco-123!")[1].status_code == 302
    assert log_in("olivia", "pw-olivia-123!", ip="10.0.0.2")[1].status_code == 302


def test_a_successful_login_resets_the_failure_count(owner):
    for attempt in range(4):
        log_in("olivia", f"guess-{attempt}")
    assert log_in("olivia", "pw-olivia-123!")[1].status_code == 302
    for attempt in range(4):
        log_in("olivia", f"again-{attempt}")
    assert log_in("olivia", "pw-olivia-123!")[1].status_code == 302


def test_behind_a_proxy_the_address_it_saw_is_the_one_locked_out(owner, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    proxy = "10.9.9.9"
    for attempt in range(5):
        # A client-supplied entry comes first; the proxy appends what it saw.
        log_in(
            "olivia", f"guess-{attempt}", ip=proxy, X_Forwarded_For=f"1.2.3.{attempt}, 198.51.100.7"
        )
    assert (
        log_in("olivia", "pw-olivia-123!", ip=proxy, X_Forwarded_For="198.51.100.7")[1].status_code
        == 429
    )
    assert (
        log_in("olivia", "pw-olivia-123!", ip=proxy, X_Forwarded_For="198.51.100.8")[1].status_code
        == 302
    )
