"""Personal keys: two kinds of token, each refused on the other's endpoints; a person's own
settings page creates (shown once), lists and revokes only their own keys; the command."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from chats.models import ApiToken, hash_api_token
from chats.services import api_token_create, api_token_revoke
from tests.conftest import ApiClient

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def personal(person, **extra):
    return api_token_create(person=person, kind=ApiToken.Kind.PERSONAL, **extra)


def test_integration_token_is_refused_on_v1_and_personal_key_on_api_v1(owner):
    _, integration = api_token_create(person=owner)
    _, key = personal(owner)

    refused = ApiClient(integration).get("/v1/models")
    assert refused.status_code == 403
    assert "integration token" in refused.json()["error"]["message"]
    assert ApiClient(key).get("/v1/models").status_code == 200

    refused = ApiClient(key).get("/api/v1/chats")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "wrong_token_kind"
    assert "personal key" in refused.json()["error"]["message"]
    assert ApiClient(integration).get("/api/v1/chats").status_code == 200


def test_personal_key_cannot_follow_api_v1_turn_streams(owner):
    _, key = personal(owner)
    response = ApiClient(key).get("/api/v1/turns/1/events")
    assert response.status_code == 403


def test_expired_and_revoked_keys_are_401(owner):
    past = timezone.now() - timedelta(minutes=1)
    _, expired = personal(owner, expires_at=past)
    token, revoked = personal(owner)
    api_token_revoke(token=token)
    for raw in (expired, revoked, "hk_not-a-key"):
        response = ApiClient(raw).get("/v1/models")
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"


def test_use_records_time_and_address(owner):
    token, key = personal(owner)
    Client().get("/v1/models", headers={"Authorization": f"Bearer {key}"}, REMOTE_ADDR="10.1.2.3")
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert token.last_used_address == "10.1.2.3"


def test_command_prints_a_personal_key(owner):
    stdout, stderr = StringIO(), StringIO()
    call_command(
        "create_api_token", "olivia", "--personal", "--name", "editor", stdout=stdout, stderr=stderr
    )
    raw = stdout.getvalue().strip()
    token = ApiToken.objects.get()
    assert token.kind == ApiToken.Kind.PERSONAL and token.name == "editor"
    assert token.key_hash == hash_api_token(raw) and raw not in stderr
    assert ApiClient(raw).get("/v1/models").status_code == 200


def logged_in(person):
    client = Client()
    client.force_login(person)
    return client


def test_settings_page_creates_a_key_shown_once_and_stored_hashed(owner):
    client = logged_in(owner)
    response = client.post("/settings/keys/", {"name": "Open WebUI"})
    assert response.status_code == 201
    token = ApiToken.objects.get(person=owner)
    assert token.kind == ApiToken.Kind.PERSONAL and token.name == "Open WebUI"
    raw = response.context["raw_key"]
    assert raw in response.content.decode() and token.key_hash == hash_api_token(raw)
    assert "no-store" in response["Cache-Control"]

    again = client.get("/settings/keys/")
    assert raw not in again.content.decode()
    assert token.prefix in again.content.decode()
    assert ApiClient(raw).get("/v1/models").status_code == 200


def test_settings_page_rejects_a_past_expiry(owner):
    response = logged_in(owner).post(
        "/settings/keys/", {"name": "old", "expires_at": "2000-01-01 00:00"}
    )
    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_settings_page_lists_only_own_personal_keys(owner, member):
    personal(member, name="members-key")
    api_token_create(person=owner, name="integration-token")
    personal(owner, name="owners-key")
    page = logged_in(owner).get("/settings/keys/").content.decode()
    assert "owners-key" in page
    assert "members-key" not in page and "integration-token" not in page


def test_revoke_own_key_works_and_another_members_key_is_404(owner, member, outsider):
    own, raw = personal(owner)
    theirs, their_raw = personal(member)
    integration, _ = api_token_create(person=owner)

    assert logged_in(owner).post(f"/settings/keys/{theirs.pk}/revoke").status_code == 404
    assert logged_in(outsider).post(f"/settings/keys/{own.pk}/revoke").status_code == 404
    # An integration token is the admin's business, not this page's.
    assert logged_in(owner).post(f"/settings/keys/{integration.pk}/revoke").status_code == 404
    assert ApiClient(their_raw).get("/v1/models").status_code == 200

    assert logged_in(owner).post(f"/settings/keys/{own.pk}/revoke").status_code == 302
    assert ApiClient(raw).get("/v1/models").status_code == 401


def test_page_needs_a_login():
    response = Client().get("/settings/keys/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_staff_revoke_any_key_in_the_admin(owner, make_person):
    staff = make_person("stella", is_staff=True, is_superuser=True)
    token, raw = personal(owner)
    listing = logged_in(staff).get("/admin/chats/apitoken/?kind=personal")
    assert token.prefix in listing.content.decode()
    response = logged_in(staff).post(
        "/admin/chats/apitoken/",
        {"action": "revoke_tokens", "_selected_action": [token.pk]},
    )
    assert response.status_code == 302
    assert ApiClient(raw).get("/v1/models").status_code == 401
