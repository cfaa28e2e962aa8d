"""LLM_VISION: which models take image parts."""

import pytest

from chats.agent.llm.vision import model_takes_images


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1-nano",
        "gpt-5",
        "claude-3-5-sonnet-latest",
        "anthropic/claude-sonnet-4",
        "google/gemini-2.5-flash",
        "qwen2.5-vl-7b-instruct",
        "Qwen/Qwen2-VL-7B-Instruct",
        "llava:13b",
        "pixtral-12b-2409",
        "llama3.2-vision:11b",
    ],
)
def test_auto_knows_vision_models(model):
    assert model_takes_images(model, "auto")
    assert not model_takes_images(model, "off")


@pytest.mark.parametrize(
    "model", ["gpt-3.5-turbo", "gpt-4", "qwen2.5-7b-instruct", "llama3.1:8b", "fake-model", ""]
)
def test_auto_sends_no_images_to_other_models(model):
    assert not model_takes_images(model, "auto")
    assert model_takes_images(model, "on")


def test_request_bodies_splice_image_urls_byte_for_byte_as_the_sdk_encodes():
    import base64
    import json
    import os

    from chats.agent.llm.openai_compat import request_body

    url = "data:image/png;base64," + base64.b64encode(os.urandom(20_000)).decode()
    params = {
        "model": "m",
        "messages": [
            {"role": "system", "content": 'quotes " and \\u0000 and a NUL \x00 in text'},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "é 中文"},
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0"}},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            },
        ],
        "stream": True,
    }
    body = request_body(params)
    assert body == json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode()
    assert json.loads(body) == params
