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


def usage_json(turn) -> dict:
    """The turn's real token counts, as the model provider reported them."""
    prompt, completion = turn.prompt_tokens, turn.completion_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def completion_json(*, completion_id: str, created: int, text: str, turn) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": MODEL_ID,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage_json(turn),
        "hermes": {"chat": turn.chat.chat_key, "turn_id": turn.pk},
    }


def chunk_json(
    *, completion_id: str, created: int, delta: dict, finish_reason=None, extra=None
) -> dict:
    chunk = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": MODEL_ID,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    return chunk | (extra or {})


def usage_chunk_json(*, completion_id: str, created: int, turn) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": MODEL_ID,
        "choices": [],
        "usage": usage_json(turn),
    }


def response_json(*, response_id: str, created: int, turn, text: str | None, status: str) -> dict:
    """A Responses API object; `text` None while in progress."""
    output = []
    if text is not None:
        output.append(
            {
                "type": "message",
                "id": f"msg_{response_id[5:]}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    usage = None
    if status == "completed":
        prompt, completion = turn.prompt_tokens, turn.completion_tokens
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": MODEL_ID,
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "none",
        "tools": [],
        "usage": usage,
        "conversation": {"id": turn.chat.chat_key},
        "hermes": {"chat": turn.chat.chat_key, "turn_id": turn.pk},
    }
