"""The dashboard composer's upload (attachments/web.py): text and files in one request, who
may post, limits with reasons, one turn after the files, announced with its files."""

import uuid
from urllib.parse import quote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from attachments.models import Attachment
from chats.models import ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure
from hermes_site.body_limits import body_limit_for

# Transactional: a stored file is processed after its commit (files_processed_inline).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("files_processed_inline"),
]


def login(person) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    return client


def upload_url(chat) -> str:
    return f"/attachments/chats/{quote(chat.chat_key, safe='/:')}/messages"


def post(client, chat, *, text="see attached", files=(), client_id=None, csrf=True):
    headers = {}
    if csrf:
        client.get("/")  # sets the CSRF cookie, as the page would
        headers["X-CSRFToken"] = client.cookies["csrftoken"].value
    data = {"text": text, "client_id": str(client_id or uuid.uuid4())}
    if files:
        data["files"] = list(files)
    return client.post(upload_url(chat), data=data, headers=headers)


def test_a_member_sends_text_and_files_in_one_request(team_chat, member, png):
    response = post(
        login(member),
        team_chat,
        files=[
            SimpleUploadedFile("截图.png", png, content_type="image/png"),
            SimpleUploadedFile("notes.txt", b"plain words\n", content_type="text/plain"),
        ],
    )
    assert response.status_code == 201, response.content
    body = response.json()
    message = Message.objects.get(pk=body["message_id"])
    assert message.text == "see attached" and message.actor.person == member
    assert [(a.name, a.media_type) for a in message.attachments.all()] == [
        ("截图.png", "image/png"),
        ("notes.txt", "text/plain"),
    ]
    assert body["refused"] == [] and body["error"] is None
    # The answer is the message as the page shows it: a thumbnail and a card.
    thumb = message.attachments.get(name="截图.png")
    assert f'src="/attachments/{thumb.pk}/thumbnail"' in body["html"]
    assert "notes.txt" in body["html"] and f'id="message-{message.pk}"' in body["html"]
    assert Turn.objects.filter(trigger=message).count() == 1


def test_files_alone_make_a_message(team_chat, member, png):
    response = post(login(member), team_chat, text="", files=[SimpleUploadedFile("a.png", png)])
    assert response.status_code == 201
    assert Message.objects.get().text == ""
    empty = post(login(member), team_chat, text="  ")
    assert empty.status_code == 400 and "attach a file" in empty.json()["error"]


def test_the_message_is_announced_after_its_files_are_stored(team_chat, member, png, monkeypatch):
    """`message_received` announces (after commit: at once outside a transaction, as in a
    request) and requests the turn: it must see the files stored already."""
    from attachments import web

    seen = []
    real = web.message_received

    def message_received(result, **kwargs):
        seen.append(Attachment.objects.filter(message=result.message).count())
        return real(result, **kwargs)

    monkeypatch.setattr(web, "message_received", message_received)
    files = [SimpleUploadedFile("a.png", png), SimpleUploadedFile("b.txt", b"two")]
    assert post(login(member), team_chat, files=files).status_code == 201
    assert seen == [2]


def test_a_repeated_send_stores_once(team_chat, member, png):
    client, client_id = login(member), uuid.uuid4()
    first = post(client, team_chat, files=[SimpleUploadedFile("a.png", png)], client_id=client_id)
    again = post(client, team_chat, files=[SimpleUploadedFile("a.png", png)], client_id=client_id)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["duplicate"] is True
    assert Message.objects.count() == 1 and Attachment.objects.count() == 1
    assert Turn.objects.count() == 1


def test_a_file_over_the_limit_is_refused_with_the_reason_and_the_message_kept(
    team_chat, member, settings
):
    settings.ATTACHMENTS_MAX_FILE_BYTES = 100
    response = post(
        login(member),
        team_chat,
        files=[SimpleUploadedFile("big.bin", b"x" * 101), SimpleUploadedFile("ok.txt", b"fine")],
    )
    assert response.status_code == 413
    body = response.json()
    assert [item["name"] for item in body["refused"]] == ["big.bin"]
    assert "big.bin" in body["error"] and "100 bytes" in body["error"]
    assert "stored without these files" in body["error"]
    message = Message.objects.get(pk=body["message_id"])
    assert [a.name for a in message.attachments.all()] == ["ok.txt"]
    assert "ok.txt" in body["html"]
    assert Turn.objects.filter(trigger=message).count() == 1  # the words still get an answer


def test_an_outsider_gets_404_and_nothing_is_stored(team_chat, outsider, png):
    response = post(login(outsider), team_chat, files=[SimpleUploadedFile("a.png", png)])
    assert response.status_code == 404
    assert not Message.objects.exists() and not Attachment.objects.exists()


def test_a_member_of_another_chat_gets_404(team_chat, make_person, png):
    other_member = make_person("mia")
    other, _ = chat_get_or_create(channel="web", chat_id="other-room", title="Other")
    chat_member_ensure(chat=other, person=other_member, role=ChatMember.Role.OWNER)
    response = post(login(other_member), team_chat, files=[SimpleUploadedFile("a.png", png)])
    assert response.status_code == 404
    assert not Message.objects.exists() and not Attachment.objects.exists()


def test_a_member_who_may_only_read_is_refused(make_person, png):
    owner, reader = make_person("olga"), make_person("ray")
    conversation, _ = chat_get_or_create(channel="openai", chat_id="conv-1", kind="api")
    chat_member_ensure(chat=conversation, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=conversation, person=reader)
    response = post(login(reader), conversation, files=[SimpleUploadedFile("a.png", png)])
    assert response.status_code == 403
    assert not Message.objects.exists() and not Attachment.objects.exists()


def test_a_post_without_the_csrf_token_is_refused(team_chat, member, png):
    response = post(login(member), team_chat, files=[SimpleUploadedFile("a.png", png)], csrf=False)
    assert response.status_code == 403
    assert not Message.objects.exists()


def test_the_upload_path_has_the_upload_body_limit(settings):
    assert body_limit_for("/attachments/chats/web:x/messages") == (
        settings.ATTACHMENTS_API_MAX_BODY_BYTES
    )
    assert body_limit_for("/chats/web:x/messages") == settings.HTTP_MAX_BODY_BYTES


def test_a_body_declared_over_the_limit_is_refused_before_storing(team_chat, member, settings):
    settings.ATTACHMENTS_API_MAX_BODY_BYTES = 2048
    response = post(login(member), team_chat, files=[SimpleUploadedFile("big.bin", b"x" * 4096)])
    assert response.status_code == 413
    assert not Message.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_settled_file_tells_every_open_page_to_fetch_its_message_again(
    team_chat, member, monkeypatch
):
    from attachments.processing import Derived, processor_register, processor_unregister
    from attachments.services import attachment_process
    from chats.agent.events import events_since

    # No files worker: the file stays pending until the test processes it.
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda *args, **kwargs: None)
    processor_register(
        "test-pending", wants=lambda a: a.name == "slow.txt", run=lambda a: Derived()
    )
    try:
        response = post(login(member), team_chat, files=[SimpleUploadedFile("slow.txt", b"x")])
        attachment = Attachment.objects.get()
        assert attachment.state == Attachment.State.PENDING
        assert "processing…" in response.json()["html"]
        attachment_process(attachment.pk)
    finally:
        processor_unregister("test-pending")
    updated = [e for e in events_since(team_chat.pk, 0) if e["type"] == "message.updated"]
    assert [(e["message"]["id"], e["attachment"]) for e in updated] == [
        (attachment.message_id, {"id": attachment.pk, "state": "ready"})
    ]
    page = login(member).get(f"/chats/{team_chat.chat_key}/messages/{attachment.message_id}")
    assert "processing…" not in page.content.decode()
