"""The webhook view and the dashboard's Telegram page (link codes, pairing approvals)."""

import json
import re

import pytest

from bots.models import BotState, LinkCode, PairingRequest
from chats.models import Message
from chats.services import actor_get_or_create, actor_link
from tests.fakes.telegram_server import FakeTelegram, private_chat, tg_user

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

SECRET = "webhook-secret-123"
ALICE = tg_user(1001, "Alice")


@pytest.fixture
def webhook(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_WEBHOOK_SECRET = SECRET
    settings.TELEGRAM_ALLOWED_USERS = ["1001"]
    BotState.objects.create(bot_id=7654321, username="hermes_test_bot")


def post(client, body, secret=SECRET):
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(
        "/telegram/webhook", data=data, content_type="application/json", headers=headers
    )


def test_the_webhook_is_off_until_configured(client, settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_WEBHOOK_SECRET = ""
    assert post(client, {"update_id": 1}).status_code == 404


def test_the_webhook_needs_the_secret_token(client, webhook):
    update = FakeTelegram().message(private_chat(ALICE), ALICE, "hi")
    assert post(client, update, secret=None).status_code == 403
    assert post(client, update, secret="wrong").status_code == 403
    assert not Message.objects.exists()


def test_the_webhook_stores_an_update_once(client, webhook):
    update = FakeTelegram().message(private_chat(ALICE), ALICE, "hi via webhook")
    first = post(client, update)
    assert first.status_code == 200 and first.json()["result"] == "answering"
    again = post(client, update)
    assert again.status_code == 200 and again.json()["result"] == "duplicate"
    assert Message.objects.filter(text="hi via webhook").count() == 1


@pytest.mark.parametrize("body", ["not json", "[1, 2]", '{"update_id": "x"}'])
def test_the_webhook_refuses_bad_bodies_clearly(client, webhook, body):
    response = post(client, body)
    assert response.status_code == 400 and response.json()["error"]


def test_the_webhook_takes_only_post(client, webhook):
    assert client.get("/telegram/webhook").status_code == 405


def test_the_telegram_page_needs_a_login(client):
    response = client.get("/telegram/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_person_creates_a_one_time_link_code_stored_only_hashed(client, owner):
    client.force_login(owner)
    page = client.post("/telegram/link-code").content.decode()
    code = re.search(r"/link ([A-Z0-9]{4}-[A-Z0-9]{4})", page).group(1)
    stored = LinkCode.objects.get(person=owner)
    assert code not in stored.code_hash and stored.is_usable
    # A new code replaces the old one.
    client.post("/telegram/link-code")
    assert LinkCode.objects.filter(person=owner).count() == 1


def test_the_page_lists_linked_telegram_accounts(client, owner):
    actor_link(
        actor=actor_get_or_create(channel="telegram", user_id=55, display_name="Liv"), person=owner
    )
    client.force_login(owner)
    assert "Liv" in client.get("/telegram/").content.decode()


def test_only_staff_see_and_decide_pairing_requests(client, owner, make_person):
    request = PairingRequest.objects.create(user_id=6666, display_name="Mallory", code="ABCD-EFGH")
    client.force_login(owner)
    assert "ABCD-EFGH" not in client.get("/telegram/").content.decode()
    assert client.post(f"/telegram/pairings/{request.pk}/approve").status_code == 403
    assert PairingRequest.objects.get().status == "pending"

    staff = make_person("sam", is_staff=True)
    client.force_login(staff)
    assert "ABCD-EFGH" in client.get("/telegram/").content.decode()
    assert client.get(f"/telegram/pairings/{request.pk}/approve").status_code == 405
    assert client.post(f"/telegram/pairings/{request.pk}/approve").status_code == 302
    assert PairingRequest.objects.get().status == "approved"
    client.post(f"/telegram/pairings/{request.pk}/revoke")
    assert not PairingRequest.objects.exists()


def test_pairing_decisions_need_the_csrf_token(owner, make_person):
    from django.test import Client

    staff = make_person("sam", is_staff=True)
    request = PairingRequest.objects.create(user_id=6666, display_name="Mallory", code="ABCD-EFGH")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff)
    assert strict.post(f"/telegram/pairings/{request.pk}/approve").status_code == 403
    assert PairingRequest.objects.get().status == "pending"


def test_staff_see_the_outbox_with_telegram_message_ids_in_the_admin(client, make_person):
    from bots.models import OutboundMessage

    OutboundMessage.objects.create(
        kind="send", telegram_chat_id=1001, message_ids=[41, 42], payload={"text": "hi"}
    )
    admin = make_person("root", is_staff=True, is_superuser=True)
    client.force_login(admin)
    page = client.get("/admin/bots/outboundmessage/").content.decode()
    assert "[41, 42]" in page
    assert client.get("/admin/bots/outboundmessage/add/").status_code == 403
