"""POST /api/v1/messages with `files` in base64: stored as multipart uploads are, checked
whole before anything is stored."""

import base64

import pytest

from attachments.models import Attachment
from chats.models import Message, Turn

pytestmark = pytest.mark.django_db

PATH = "/api/v1/messages"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _post(api, files, **fields):
    payload = {"chat_id": "ops", "user_id": "bot", "message_id": "m1", "text": "see attached"}
    payload.update(fields)
    if files is not None:
        payload["files"] = files
    return api.post(PATH, payload)


def test_base64_files_are_stored_with_sniffed_types_and_exact_bytes(api_for, owner, png):
    api = api_for(owner)
    response = _post(
        api,
        [
            {"name": "截图.jpg", "data_base64": b64(png), "type": "image/jpeg"},
            {"name": "notes.txt", "data_base64": b64(b"plain words\n")},
        ],
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert [(a["name"], a["media_type"]) for a in body["attachments"]] == [
        ("截图.jpg", "image/png"),  # sniffed from the bytes, not the claimed JPEG
        ("notes.txt", "text/plain"),
    ]
    assert [a["name"] for a in body["message"]["attachments"]] == ["截图.jpg", "notes.txt"]
    # A document is read (extraction) before the turn: it waits for it (see below).
    assert body["attachments"][1]["state"] == "pending"
    assert body["turn"] is None and body["turn_waits_for_files"] is True
    stored = Attachment.objects.get(name="截图.jpg")
    assert stored.declared_type == "image/jpeg"
    download = api.get(body["attachments"][0]["download_url"])
    assert b"".join(download.streaming_content) == png


def test_a_post_without_files_is_unchanged(api_for, owner):
    response = _post(api_for(owner), None)
    assert response.status_code == 201
    assert "attachments" not in response.json() or response.json()["attachments"] == []
    assert response.json()["message"]["attachments"] == []


def test_mime_line_breaks_are_accepted(api_for, owner, png):
    wrapped = "\r\n".join(b64(png)[i : i + 76] for i in range(0, len(b64(png)), 76))
    response = _post(api_for(owner), [{"name": "a.png", "data_base64": wrapped}])
    assert response.status_code == 201, response.content
    assert Attachment.objects.get().size == len(png)


@pytest.mark.parametrize(
    "data",
    ["not base64!", "QUJD=", "QUJDRA", "QUJD\u00e9", "QU=JD", "QU==QUJD", "QUJD===="],
    ids=[
        "punctuation",
        "bad-padding",
        "no-padding",
        "non-ascii",
        "padding-inside",
        "data-after-padding",
        "too-much-padding",
    ],
)
def test_bad_base64_is_400_and_nothing_is_stored(api_for, owner, png, data):
    response = _post(
        api_for(owner),
        [{"name": "ok.png", "data_base64": b64(png)}, {"name": "bad.bin", "data_base64": data}],
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_base64"
    assert error["field"] == "files[1].data_base64"
    assert "not valid base64" in error["message"]
    assert not Message.objects.exists() and not Attachment.objects.exists()


def test_a_file_over_the_json_limit_is_413_and_points_to_multipart(api_for, owner, settings):
    settings.ATTACHMENTS_JSON_MAX_BYTES = 100
    response = _post(api_for(owner), [{"name": "big.bin", "data_base64": b64(b"x" * 101)}])
    assert response.status_code == 413
    assert "/api/v1/uploads/messages" in response.json()["error"]["message"]
    assert not Message.objects.exists()
    exactly = _post(api_for(owner), [{"name": "ok.bin", "data_base64": b64(b"x" * 100)}])
    assert exactly.status_code == 201


def test_the_json_body_limit_applies_to_a_post_with_files(api_for, owner, settings):
    settings.API_MAX_BODY_BYTES = 2048
    response = _post(api_for(owner), [{"name": "a.bin", "data_base64": b64(b"x" * 4096)}])
    assert response.status_code == 413
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    ("files", "field"),
    [
        ("abc", "files"),
        ([{"name": "a"}], "files[0].data_base64"),
        ([{"data_base64": "QUJD", "colour": "red"}], "files[0].colour"),
        ([{"data_base64": "QUJD", "name": 7}], "files[0].name"),
        (["QUJD"], "files[0]"),
    ],
)
def test_malformed_files_are_400_naming_the_field(api_for, owner, files, field):
    response = _post(api_for(owner), files)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == field
    assert not Message.objects.exists()


def test_too_many_files_are_refused_before_the_message_is_stored(api_for, owner, settings):
    settings.ATTACHMENTS_MAX_PER_MESSAGE = 1
    files = [{"data_base64": b64(b"1")}, {"data_base64": b64(b"2")}]
    response = _post(api_for(owner), files)
    assert response.status_code == 400 and response.json()["error"]["code"] == "too_many_files"
    assert not Message.objects.exists()


def test_a_file_over_the_chats_day_keeps_the_message_and_says_why(api_for, owner, settings):
    settings.ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY = 10
    files = [  # binary, so nothing holds the turn for an extraction
        {"name": "small.bin", "data_base64": b64(b"\x00\x01\x02\x03\x04")},
        {"name": "more.bin", "data_base64": b64(b"\x00" * 8)},
    ]
    response = _post(api_for(owner), files)
    assert response.status_code == 413
    body = response.json()
    assert body["error"]["code"] == "attachment_refused"
    assert "more.bin" in body["error"]["message"]
    assert [a["name"] for a in body["attachments"]] == ["small.bin"]
    assert [item["name"] for item in body["refused"]] == ["more.bin"]
    assert Message.objects.get().text == "see attached" and body["turn"] is not None


def test_a_repeat_is_a_duplicate_and_stores_no_more_files(api_for, owner, png):
    api = api_for(owner)
    files = [{"name": "a.png", "data_base64": b64(png)}]
    assert _post(api, files).status_code == 201
    again = _post(api, files)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert [a["name"] for a in again.json()["message"]["attachments"]] == ["a.png"]
    assert Attachment.objects.count() == 1


def test_hidden_unicode_and_path_characters_in_names_are_cleaned(api_for, owner):
    names = [
        "../../etc/passwd",
        "C:\\Windows\\system32\\evil.exe",
        "invoice\u202egnp.exe",  # right-to-left override: would show as "invoiceexe.png"
        "zero\u200bwidth\u2060.txt",
        "bell\x07\x00.txt",
    ]
    files = [{"name": name, "data_base64": b64(b"text")} for name in names]
    response = _post(api_for(owner), files)
    assert response.status_code == 201, response.content
    assert [a["name"] for a in response.json()["attachments"]] == [
        "passwd",
        "evil.exe",
        "invoicegnp.exe",
        "zerowidth.txt",
        "bell.txt",
    ]


@pytest.mark.parametrize("who", ["outsider", "member"])
def test_someone_who_does_not_read_the_chat_attaches_nothing(
    api_for, owner, team_chat, png, request, who
):
    """Another person's token (an outsider; a member of another chat) is refused before a
    file is decoded into the chat, and nothing is stored."""
    assert _post(api_for(owner), None).status_code == 201
    other = request.getfixturevalue(who)
    response = _post(api_for(other), [{"name": "a.png", "data_base64": b64(png)}], message_id="m2")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "not_a_member"
    assert Message.objects.count() == 1 and not Attachment.objects.exists()


def test_an_unknown_field_names_files_among_the_allowed(api_for, owner):
    response = _post(api_for(owner), None, file=[])
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "file"
    assert ", files." in response.json()["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_the_turn_of_a_json_post_waits_for_its_pending_files(api_for, owner, monkeypatch):
    """As the multipart upload: a file still being processed holds the turn until it settles."""
    from attachments.processing import Derived, processor_register, processor_unregister
    from attachments.services import attachment_process

    monkeypatch.setattr("attachments.services.current_app.send_task", lambda *a, **k: None)
    processor_register(
        "test-slow", wants=lambda a: a.name.endswith(".txt"), run=lambda a: Derived("words")
    )
    try:
        response = _post(api_for(owner), [{"name": "notes.txt", "data_base64": b64(b"runbook\n")}])
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["turn"] is None and body["turn_waits_for_files"] is True
        assert not Turn.objects.exists()
        attachment_process(body["attachments"][0]["id"])
        assert Turn.objects.get().trigger_id == body["message"]["id"]
    finally:
        processor_unregister("test-slow")


def test_a_json_post_whose_files_are_ready_gets_its_turn_at_once(api_for, owner, png):
    body = _post(api_for(owner), [{"name": "a.png", "data_base64": b64(png)}]).json()
    assert body["turn"] is not None and body["turn_waits_for_files"] is False
