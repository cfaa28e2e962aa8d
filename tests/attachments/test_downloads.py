"""Attachments in the API history, and downloads served only to readers of the chat."""

from urllib.parse import quote

import pytest
from django.test import Client

from attachments.services import attachment_store
from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(say, png):
    return attachment_store(message=say("the screenshot"), name="截图.png", data=png)


def _api_path(attachment):
    return f"/api/v1/attachments/{attachment.pk}"


def test_the_history_lists_each_messages_attachments(api_for, owner, team_chat, stored, say):
    say("no file here")
    response = api_for(owner).get(f"/api/v1/chats/{quote(team_chat.chat_key, safe='')}/messages")
    assert response.status_code == 200
    messages = response.json()["messages"]
    assert messages[0]["attachments"] == [
        {
            "id": stored.pk,
            "name": "截图.png",
            "kind": "image",
            "media_type": "image/png",
            "size": stored.size,
            "sha256": stored.sha256,
            "state": "ready",
            "failure": None,
            "created_at": messages[0]["attachments"][0]["created_at"],
            "download_url": _api_path(stored),
            "received": True,
        }
    ]
    assert messages[1]["attachments"] == []


def test_a_reader_downloads_the_bytes_with_the_name_intact(api_for, member, stored, png):
    response = api_for(member).get(_api_path(stored))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == png
    assert response["Content-Type"] == "image/png"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"].startswith("attachment; ")
    assert f"filename*=UTF-8''{quote('截图.png')}" in response["Content-Disposition"]
    assert "sandbox" in response["Content-Security-Policy"]


def test_an_outsiders_token_gets_404(api_for, outsider, stored):
    response = api_for(outsider).get(_api_path(stored))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_member_of_another_chat_gets_404(api_for, make_person, stored):
    elsewhere = make_person("elsa")
    chat, _ = chat_get_or_create(channel="web", chat_id="other-room")
    chat_member_ensure(chat=chat, person=elsewhere, role=ChatMember.Role.OWNER)
    assert api_for(elsewhere).get(_api_path(stored)).status_code == 404


def test_no_token_is_refused(stored):
    assert Client().get(_api_path(stored)).status_code == 401


def test_html_is_never_served_as_html(api_for, owner, say):
    page = attachment_store(
        message=say(), name="page.html", data=b"<!doctype html><script>alert(1)</script>"
    )
    response = api_for(owner).get(_api_path(page))
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment; ")


def test_the_dashboard_serves_readers_only(client, member, outsider, stored, png):
    path = f"/attachments/{stored.pk}/download"
    assert client.get(path).status_code == 302  # to the login page
    client.force_login(outsider)
    assert client.get(path).status_code == 404
    client.force_login(member)
    response = client.get(path)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == png
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "filename*=UTF-8''" in response["Content-Disposition"]


def test_a_failed_attachment_has_nothing_to_download(api_for, owner, say):
    empty = attachment_store(message=say(), name="empty.txt", data=b"")
    assert api_for(owner).get(_api_path(empty)).status_code == 404


def test_search_hits_carry_their_attachments(api_for, owner, stored):
    response = api_for(owner).get("/api/v1/search", {"q": "screenshot"})
    assert response.status_code == 200
    [hit] = response.json()["results"]
    assert [a["id"] for a in hit["message"]["attachments"]] == [stored.pk]
