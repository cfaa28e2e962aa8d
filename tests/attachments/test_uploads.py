"""POST /api/v1/uploads/messages: a message with files, stored once, files within limits."""

from urllib.parse import quote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.models import Attachment
from chats.models import Message, Turn
from hermes_site.body_limits import body_limit_for

# Transactional: a stored file is processed after its commit (files_processed_inline).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("files_processed_inline"),
]

PATH = "/api/v1/uploads/messages"


def _post(api, fields, files=(), **extra):
    data = {"chat_id": "ops", "user_id": "bot", "message_id": "m1", "text": "see attached"}
    data.update(fields)
    if files:
        data["files"] = list(files)
    return api.client.post(PATH, data=data, headers=api._headers(None), **extra)


def test_a_message_with_files_is_stored_with_sniffed_attachments(api_for, owner, png):
    api = api_for(owner)
    response = _post(
        api,
        {},
        [
            SimpleUploadedFile("报告.pdf", png, content_type="application/pdf"),
            SimpleUploadedFile("notes.txt", b"plain words\n", content_type="text/plain"),
        ],
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert [(a["name"], a["media_type"]) for a in body["attachments"]] == [
        ("报告.pdf", "image/png"),
        ("notes.txt", "text/plain"),
    ]
    assert body["message"]["text"] == "see attached"
    assert [a["name"] for a in body["message"]["attachments"]] == ["报告.pdf", "notes.txt"]
    assert body["turn"]["status"] == Turn.Status.QUEUED
    download = api.get(body["attachments"][0]["download_url"])
    assert b"".join(download.streaming_content) == png
    assert f"filename*=UTF-8''{quote('报告.pdf')}" in download["Content-Disposition"]


def test_a_repeated_post_is_a_duplicate_and_stores_no_more_files(api_for, owner, png):
    api = api_for(owner)
    assert _post(api, {}, [SimpleUploadedFile("a.png", png)]).status_code == 201
    again = _post(api, {}, [SimpleUploadedFile("a.png", png)])
    assert again.status_code == 200
    assert again.json()["duplicate"] is True and again.json()["turn"] is None
    assert Message.objects.count() == 1 and Attachment.objects.count() == 1


def test_a_file_over_the_limit_is_413_and_the_message_and_other_files_are_kept(
    api_for, owner, settings
):
    settings.ATTACHMENTS_MAX_FILE_BYTES = 100
    response = _post(
        api_for(owner),
        {},
        [SimpleUploadedFile("big.bin", b"x" * 101), SimpleUploadedFile("ok.txt", b"fine")],
    )
    assert response.status_code == 413
    body = response.json()
    assert body["error"]["code"] == "attachment_refused"
    assert "big.bin" in body["error"]["message"] and "100 bytes" in body["error"]["message"]
    assert [item["name"] for item in body["refused"]] == ["big.bin"]
    assert [a["name"] for a in body["attachments"]] == ["ok.txt"]
    assert Message.objects.get().text == "see attached"
    assert body["turn"] is not None  # the person still gets an answer to their words


def test_too_many_files_is_400_with_the_reason(api_for, owner, settings):
    settings.ATTACHMENTS_MAX_PER_MESSAGE = 1
    response = _post(
        api_for(owner), {}, [SimpleUploadedFile("1.txt", b"1"), SimpleUploadedFile("2.txt", b"2")]
    )
    assert response.status_code == 400
    assert "at most 1 files" in response.json()["error"]["message"]
    assert Attachment.objects.count() == 1


def test_a_declared_body_over_the_upload_limit_is_413_before_anything_is_stored(
    api_for, owner, settings
):
    settings.ATTACHMENTS_API_MAX_BODY_BYTES = 2048
    response = _post(api_for(owner), {}, [SimpleUploadedFile("a.txt", b"x" * 4096)])
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert not Message.objects.exists()


def test_the_upload_path_has_its_own_body_limit(settings):
    assert body_limit_for(PATH) == settings.ATTACHMENTS_API_MAX_BODY_BYTES
    assert body_limit_for("/api/v1/messages") == settings.API_MAX_BODY_BYTES


def test_someone_not_in_the_chat_stores_nothing(api_for, owner, outsider, png):
    assert _post(api_for(owner), {}).status_code == 201
    response = _post(api_for(outsider), {"message_id": "m2"}, [SimpleUploadedFile("a.png", png)])
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "not_a_member"
    assert Message.objects.count() == 1 and not Attachment.objects.exists()


def test_json_is_refused_with_415(api_for, owner):
    response = api_for(owner).post(PATH, {"chat_id": "ops"})
    assert response.status_code == 415


def test_unknown_fields_are_refused(api_for, owner):
    response = _post(api_for(owner), {"colour": "blue"})
    assert response.status_code == 400 and response.json()["error"]["field"] == "colour"
    assert not Message.objects.exists()


def test_respond_false_queues_no_turn(api_for, owner):
    response = _post(api_for(owner), {"respond": "false"}, [SimpleUploadedFile("a.txt", b"a")])
    assert response.status_code == 201 and response.json()["turn"] is None


def test_an_oversized_text_field_is_413_not_a_server_error(api_for, owner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    response = _post(api_for(owner), {"text": "x" * 4096}, [SimpleUploadedFile("a.txt", b"a")])
    assert response.status_code == 413
    assert not Message.objects.exists()
