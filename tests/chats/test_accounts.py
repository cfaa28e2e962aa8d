import pytest
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
    assert Client().login(username="olivia", password="a-new-long-passphrase-42")


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
    assert Client().login(username="olivia", password="pw-olivia-123!")


def test_anonymous_cannot_reach_the_password_page():
    response = Client().get("/accounts/password/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
