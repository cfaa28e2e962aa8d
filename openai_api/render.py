"""OpenAI wire format: the model list, chat completions and their streamed chunks."""

import time

MODEL_ID = "hermes-hub"
MODEL_CREATED = 1767225600  # a fixed date: the model list must not change between calls


def models_json() -> dict:
    return {
        "object": "list",
        "data": [
            {"id": MODEL_ID, "object": "model", "created": MODEL_CREATED, "owned_by": "hermes-hub"}
        ],
    }


def now() -> int:
    return int(time.time())
