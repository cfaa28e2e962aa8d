"""`/v1` `input_audio` content parts (base64 `data` + `format`) are stored as audio
attachments of the user message, like images and files; bytes that are not audio, an unknown
format and bad base64 are a 400 in OpenAI's shape and store nothing."""

import base64

import pytest

from attachments.models import Attachment
from chats.models import ApiToken, Message, TurnHold
from chats.services import api_token_create
from openai_api.following import land
from openai_api.parsing import parse_chat_completion
from tests.attachments.audio import speech_wav
from tests.attachments.conftest import png_bytes
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

COMPLETIONS = "/v1/chat/completions"


class _Request:
    headers: dict = {}


def audio_message(data: bytes, fmt: str = "wav", text: str | None = "Please answer this") -> dict:
    content = [] if text is None else [{"type": "text", "text": text}]
    content.append(
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt},
        }
    )
    return {"model": "hermes-hub", "messages": [{"role": "user", "content": content}]}


def test_an_input_audio_part_is_an_audio_attachment_of_the_user_message(owner):
    wav = speech_wav("what time is the standup")
    landed, _ = land(owner, parse_chat_completion(_Request(), audio_message(wav, text=None)))
    attachment = Attachment.objects.get()
    assert attachment.message == landed.trigger
    assert (attachment.kind, attachment.media_type) == ("audio", "audio/x-wav")  # sniffed
    assert attachment.declared_type == "audio/wav" and attachment.name == "audio.wav"
    with attachment.blob.file.open("rb") as handle:
        assert handle.read() == wav
    # The recording is still being transcribed: the turn is held for it, not yet requested.
    assert attachment.state == Attachment.State.PENDING
    assert landed.held and landed.turn is None
    assert TurnHold.objects.filter(message=landed.trigger, state=TurnHold.State.HELD).exists()


@pytest.mark.parametrize(
    ("data", "fmt", "needle"),
    [
        (png_bytes(), "wav", "is not audio (its bytes are image/png)"),
        (b"RIFF", "aiff", "input_audio.format must be one of wav, mp3"),
        (None, "wav", "not valid base64"),
    ],
)
def test_bad_audio_is_a_400_and_stores_nothing(data, fmt, needle, owner):
    _, raw = api_token_create(person=owner, kind=ApiToken.Kind.PERSONAL)
    body = audio_message(data or b"", fmt)
    if data is None:
        body["messages"][0]["content"][1]["input_audio"]["data"] = "***"
    response = ApiClient(raw).post(COMPLETIONS, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["param"] == "messages[0].content[1]" and needle in error["message"]
    assert not Message.objects.exists() and not Attachment.objects.exists()
