"""The official `openai` SDK sends images to a running hub (daphne + a Celery worker + the
fake model): a Chat Completions `image_url` data URL and a Responses `input_image` become
attachments of the stored user message, with the type sniffed and the bytes exact, and the
turn answers as for any message."""

import base64
import json
import os

import openai
import pytest

from attachments.models import Attachment
from chats.models import ApiToken, Message
from chats.services import api_token_create
from tests.attachments.conftest import png_bytes
from tests.fakes import openai_server as fake_openai
from tests.live import LiveStack

pytestmark = pytest.mark.timeout(240)

# The smallest GIF: a 1×1 image, for a second media type the hub must sniff.
GIF = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")


@pytest.fixture
def files_stack(transactional_db, fake_llm, tmp_path):
    """daphne + a worker whose attachment blobs go to a folder this test reads."""
    blobs = tmp_path / "blobs"
    stack = LiveStack(
        llm_base_url=fake_llm.base_url,
        worker_name=f"files-{os.getpid()}@%h",
        extra_env={"ATTACHMENTS_STORAGE_OPTIONS": json.dumps({"location": str(blobs)})},
    )
    try:
        stack.start_web()
        stack.start_worker()
        yield stack, blobs
    finally:
        stack.stop()


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def test_the_sdk_sends_images_that_are_stored_on_the_message(files_stack, fake_llm, make_person):
    stack, blobs = files_stack
    alice = make_person("alice")
    _, key = api_token_create(person=alice, kind=ApiToken.Kind.PERSONAL)
    sdk = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)
    png = png_bytes(5, 3)

    fake_llm.script(fake_openai.text("A red rectangle."))
    completion = sdk.chat.completions.create(
        model="hermes-hub",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is on this screen?"},
                    # Claimed as JPEG: the hub believes the bytes, not the claim.
                    {"type": "image_url", "image_url": {"url": data_url(png, "image/jpeg")}},
                ],
            }
        ],
    )
    assert completion.choices[0].message.content == "A red rectangle."
    question = Message.objects.get(role="user", text="What is on this screen?")
    image = Attachment.objects.get(message=question)
    assert (image.media_type, image.kind, image.declared_type) == (
        "image/png",
        "image",
        "image/jpeg",
    )
    assert (blobs / image.blob.file.name).read_bytes() == png

    fake_llm.script(fake_openai.text("A single pixel."))
    response = sdk.responses.create(
        model="hermes-hub",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "And this one?"},
                    {"type": "input_image", "image_url": data_url(GIF, "image/gif")},
                ],
            }
        ],
    )
    assert response.output_text == "A single pixel."
    pixel = Attachment.objects.get(message__text="And this one?")
    assert (pixel.media_type, pixel.name) == ("image/gif", "image.gif")
    assert (blobs / pixel.blob.file.name).read_bytes() == GIF

    # A URL while fetching is off (the default): a clear 400 the SDK raises, nothing stored.
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(
            model="hermes-hub",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "fetch this"},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                    ],
                }
            ],
        )
    assert "OPENAI_API_FETCH_IMAGE_URLS" in refused.value.message
    assert not Message.objects.filter(text="fetch this").exists()
    assert Attachment.objects.count() == 2
