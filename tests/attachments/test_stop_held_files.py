"""Stop while a message waits for its files (a real pending file through the upload API):
the message and its file stay, the file is still read, and no turn runs."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.models import Attachment
from attachments.processing import Derived, processor_register, processor_unregister
from attachments.services import attachment_process
from chats.models import Message, Turn, TurnHold

pytestmark = pytest.mark.django_db


@pytest.fixture
def slow_text(monkeypatch):
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda *a, **k: None)
    processor_register(
        "test-slow", wants=lambda a: a.name.endswith(".txt"), run=lambda a: Derived("words")
    )
    yield
    processor_unregister("test-slow")


def test_stopping_a_message_held_for_its_files_keeps_it_and_runs_no_turn(api_for, owner, slow_text):
    api = api_for(owner)
    data = {"chat_id": "ops", "user_id": "bot", "message_id": "m1", "text": "read this"}
    data["files"] = [SimpleUploadedFile("notes.txt", b"the runbook\n")]
    response = api.client.post("/api/v1/uploads/messages", data=data, headers=api._headers(None))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["turn_waits_for_files"] is True
    message = Message.objects.get(pk=body["message"]["id"])

    stopped = api.post(f"/api/v1/chats/{message.chat.chat_key}/stop", {})
    assert stopped.json() == {"stopped": 1}

    read = attachment_process(body["attachments"][0]["id"])  # the file is still read
    assert read.state == Attachment.State.READY
    assert not Turn.objects.exists()
    assert TurnHold.objects.get(message=message).state == TurnHold.State.RELEASED
    assert Message.objects.filter(pk=message.pk, text="read this").exists()


def test_the_dashboards_upload_offers_stop_and_stop_releases_the_held_message(
    team_chat, member, slow_text
):
    import uuid
    from urllib.parse import quote

    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    client.get("/")
    headers = {"X-CSRFToken": client.cookies["csrftoken"].value}
    response = client.post(
        f"/attachments/chats/{quote(team_chat.chat_key, safe='/:')}/messages",
        data={
            "text": "read this first",
            "client_id": str(uuid.uuid4()),
            "files": [SimpleUploadedFile("notes.txt", b"the runbook\n")],
        },
        headers=headers,
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["turn_waits_for_files"] is True
    assert body["stop_url"] == f"/chats/{team_chat.chat_key}/stop"
    assert client.post(body["stop_url"], headers=headers).status_code == 204

    [attachment_id] = body["attachments"]
    assert attachment_process(attachment_id).state == Attachment.State.READY
    assert not Turn.objects.exists()
    assert Message.objects.filter(pk=body["message_id"], text="read this first").exists()
