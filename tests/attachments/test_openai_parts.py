"""/v1 image and file parts become attachments of the stored user message; data: URLs always,
URLs only when fetching is on and never from private addresses; refusals store nothing."""

import base64

import pytest

from attachments.models import Attachment
from chats.models import ApiToken, Message, Turn
from chats.services import api_token_create
from openai_api.following import land
from openai_api.parsing import parse_chat_completion, parse_responses
from tests.attachments.conftest import png_bytes
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

COMPLETIONS = "/v1/chat/completions"
RESPONSES = "/v1/responses"
PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


class _Request:
    headers: dict = {}


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def image_message(url: str, text: str = "What is on this screen?") -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }


def completion(*messages) -> dict:
    return {"model": "hermes-hub", "messages": list(messages)}


@pytest.fixture
def key_of():
    def key(person) -> ApiClient:
        _, raw = api_token_create(person=person, kind=ApiToken.Kind.PERSONAL)
        return ApiClient(raw)

    return key


def _blob_bytes(attachment: Attachment) -> bytes:
    with attachment.blob.file.open("rb") as handle:
        return handle.read()


def test_an_image_url_data_part_is_stored_on_the_user_message(owner, png):
    body = completion(image_message(data_url(png, "image/jpeg")))
    landed, _ = land(owner, parse_chat_completion(_Request(), body))
    attachment = Attachment.objects.get()
    assert attachment.message == landed.trigger and landed.trigger.text == "What is on this screen?"
    assert (attachment.media_type, attachment.kind) == ("image/png", "image")  # sniffed
    assert attachment.declared_type == "image/jpeg" and attachment.name == "image.jpg"
    assert _blob_bytes(attachment) == png
    assert landed.turn is not None and landed.turn.status == Turn.Status.QUEUED


def test_only_the_last_user_message_brings_its_files(owner, png):
    first = image_message(data_url(png, "image/png"), "first look")
    landed, _ = land(owner, parse_chat_completion(_Request(), completion(first)))
    assert Attachment.objects.count() == 1
    # The client resends the conversation with the answer and a new question: the earlier
    # image is not stored again (it is on the first message already).
    again = completion(
        first,
        {"role": "assistant", "content": "A red square."},
        {"role": "user", "content": "Thanks"},
    )
    Turn.objects.filter(pk=landed.turn.pk).update(status=Turn.Status.COMPLETED)
    later, _ = land(owner, parse_chat_completion(_Request(), again))
    assert later.chat == landed.chat  # the image is part of the message's digest, both times
    assert Attachment.objects.count() == 1


def test_the_same_words_with_another_image_are_another_message(owner, png):
    """Two new conversations saying the same words with different images, the first still
    unanswered: the second is not taken for a retry of the first."""
    first, _ = land(
        owner,
        parse_chat_completion(_Request(), completion(image_message(data_url(png, "image/png")))),
    )
    other = png_bytes(7, 7)
    second, _ = land(
        owner,
        parse_chat_completion(_Request(), completion(image_message(data_url(other, "image/png")))),
    )
    assert second.trigger != first.trigger and second.turn != first.turn
    assert _blob_bytes(second.trigger.attachments.get()) == other
    # The very same request again is a retry: it follows the first turn, stores nothing.
    again, _ = land(
        owner,
        parse_chat_completion(_Request(), completion(image_message(data_url(png, "image/png")))),
    )
    assert again.trigger == first.trigger and Attachment.objects.count() == 2


def test_an_image_alone_is_a_message(owner, png):
    only_image = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": data_url(png, "image/png")}}],
    }
    landed, _ = land(owner, parse_chat_completion(_Request(), completion(only_image)))
    assert landed.trigger.text == "" and landed.trigger.attachments.count() == 1


def test_responses_input_image_and_input_file_are_stored(owner, png):
    body = {
        "model": "hermes-hub",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Compare these"},
                    {"type": "input_image", "image_url": data_url(png, "image/png")},
                    {
                        "type": "input_file",
                        "filename": "runbook.pdf",
                        "file_data": data_url(PDF, "application/pdf"),
                    },
                ],
            }
        ],
    }
    landed, _ = land(owner, parse_responses(_Request(), body).conversation)
    stored = list(landed.trigger.attachments.order_by("id"))
    assert [(a.name, a.media_type) for a in stored] == [
        ("image.png", "image/png"),
        ("runbook.pdf", "application/pdf"),
    ]
    assert [_blob_bytes(a) for a in stored] == [png, PDF]


def test_a_chat_completions_file_part_with_bare_base64(owner):
    part = {
        "type": "file",
        "file": {"filename": "notes.txt", "file_data": base64.b64encode(b"hello").decode()},
    }
    message = {"role": "user", "content": [{"type": "text", "text": "read"}, part]}
    landed, _ = land(owner, parse_chat_completion(_Request(), completion(message)))
    attachment = landed.trigger.attachments.get()
    assert (attachment.name, attachment.media_type) == ("notes.txt", "text/plain")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("data:image/png;base64,***", "not valid base64"),
        ("data:image/png;base64", "not a data: URL"),
        ("https://example.com/cat.png", "OPENAI_API_FETCH_IMAGE_URLS"),
        ("http://example.com/cat.png", "OPENAI_API_FETCH_IMAGE_URLS"),
    ],
)
def test_refused_parts_are_a_400_in_openai_shape_and_store_nothing(key_of, owner, url, needle):
    response = key_of(owner).post(COMPLETIONS, completion(image_message(url)))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[0].content[1]"
    assert needle in error["message"]
    assert not Message.objects.exists() and not Attachment.objects.exists()


def test_a_file_id_is_refused_with_a_reason(key_of, owner):
    body = {
        "model": "hermes-hub",
        "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}],
    }
    response = key_of(owner).post(RESPONSES, body)
    assert response.status_code == 400
    assert "file ids are not supported" in response.json()["error"]["message"]
    assert not Message.objects.exists()


def test_a_part_over_the_file_limit_is_413(key_of, owner, settings):
    settings.ATTACHMENTS_MAX_FILE_BYTES = 10
    response = key_of(owner).post(
        COMPLETIONS, completion(image_message(data_url(b"x" * 11, "a/b")))
    )
    assert response.status_code == 413
    assert not Message.objects.exists()


def test_images_are_refused_on_assistant_messages_and_in_instructions(key_of, owner, png):
    assistant = {
        "role": "assistant",
        "content": image_message(data_url(png, "image/png"))["content"],
    }
    response = key_of(owner).post(
        COMPLETIONS, completion(assistant, {"role": "user", "content": "hi"})
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[0].content[1]"
    # A part type no app takes (input_audio is voice's now, tests/attachments/test_openai_audio.py).
    unknown = completion({"role": "user", "content": [{"type": "video_url", "video_url": {}}]})
    response = key_of(owner).post(COMPLETIONS, unknown)
    assert response.status_code == 400 and "image_url" in response.json()["error"]["message"]
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/secret.png",
        "https://10.1.2.3/internal.png",
        "https://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "https://[::1]/secret.png",
        "https://[::ffff:127.0.0.1]/secret.png",
        "https://[fe80::1]/x.png",
        "https://224.0.0.1/x.png",
        "https://0.0.0.0/x.png",
        "https://localhost/secret.png",  # a name that resolves to loopback
        "https://user:pw@example.com/x.png",
    ],
)
def test_fetching_when_on_refuses_private_addresses(key_of, owner, settings, url):
    settings.OPENAI_API_FETCH_IMAGE_URLS = True
    response = key_of(owner).post(COMPLETIONS, completion(image_message(url)))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "url_refused"
    assert "private" in error["message"] or "password" in error["message"]
    assert not Message.objects.exists() and not Attachment.objects.exists()


@pytest.mark.parametrize("who", ["outsider", "member"])
def test_someone_who_does_not_own_the_chat_attaches_nothing(
    key_of, owner, team_chat, png, request, who
):
    """A personal key of someone who does not read the named chat (an outsider; a member of
    another chat naming the owner's own conversation) stores no file there."""
    landed, _ = land(
        owner,
        parse_chat_completion(_Request(), completion(image_message(data_url(png, "image/png")))),
    )
    other = request.getfixturevalue(who)
    response = key_of(other).post(
        COMPLETIONS,
        completion(image_message(data_url(png, "image/png"), "mine now")),
        headers={"X-Hermes-Chat": landed.chat.chat_key},
    )
    assert response.status_code == 404
    assert Attachment.objects.count() == 1
    assert not Message.objects.filter(text="mine now").exists()


def test_an_image_posted_into_a_named_web_room_lands_on_that_message(owner, team_chat, png):
    request = _Request()
    request.headers = {"X-Hermes-Chat": team_chat.chat_key}
    body = completion(image_message(data_url(png, "image/png"), "for the room"))
    landed, _ = land(owner, parse_chat_completion(request, body))
    assert landed.chat == team_chat
    assert landed.trigger.attachments.get().media_type == "image/png"


def test_a_limit_met_while_storing_rolls_the_request_back(key_of, owner, settings, png):
    settings.ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY = len(png) + 10
    message = image_message(data_url(png, "image/png"), "two images")
    message["content"].append({"type": "image_url", "image_url": {"url": data_url(png, "x/y")}})
    response = key_of(owner).post(COMPLETIONS, completion(message))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "attachment_refused"
    assert not Message.objects.exists() and not Attachment.objects.exists()


def test_a_file_still_to_be_read_holds_the_turn_and_a_retry_follows_the_same_message(owner):
    """A PDF is read after it is stored: the turn is held (the endpoint follows the turn the
    hold's release requests); the same request again lands on the same held message."""
    part = {
        "type": "file",
        "file": {"filename": "runbook.pdf", "file_data": data_url(PDF, "application/pdf")},
    }
    body = completion({"role": "user", "content": [{"type": "text", "text": "read it"}, part]})
    landed, _ = land(owner, parse_chat_completion(_Request(), body))
    assert landed.held and landed.turn is None and landed.new
    assert landed.trigger.attachments.get().state == Attachment.State.PENDING
    again, _ = land(owner, parse_chat_completion(_Request(), body))
    assert again.held and again.turn is None and again.trigger == landed.trigger
    assert Message.objects.filter(text="read it").count() == 1
    assert not Turn.objects.exists()


def test_in_a_named_room_a_retry_of_a_held_message_stores_nothing_twice(owner, team_chat):
    part = {
        "type": "file",
        "file": {"filename": "runbook.pdf", "file_data": data_url(PDF, "application/pdf")},
    }
    body = completion({"role": "user", "content": [{"type": "text", "text": "read it"}, part]})
    body["metadata"] = {"chat": team_chat.chat_key}
    landed, _ = land(owner, parse_chat_completion(_Request(), body))
    assert landed.held and landed.turn is None and landed.chat == team_chat
    again, _ = land(owner, parse_chat_completion(_Request(), body))
    assert again.held and again.trigger == landed.trigger
    assert Message.objects.filter(chat=team_chat, text="read it").count() == 1
    assert not Turn.objects.exists()
