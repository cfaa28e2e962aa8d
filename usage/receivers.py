"""The usage app listens to the engine (none of chats imports this app): model work is
recorded inside the transaction that stores its counters, tool calls after their result is
stored. A failing recorder is logged by the sender and never costs a turn its outcome."""

from django.db import transaction

from chats.signals import model_usage, tool_call_finished
from usage import services


def on_model_usage(
    sender, kind, chat_id, turn, model, calls, prompt_tokens, completion_tokens, **kwargs
) -> None:
    with transaction.atomic():  # a savepoint: a failure here leaves the caller's work intact
        services.usage_record_model_work(
            kind=kind,
            chat_id=chat_id,
            turn=turn,
            message_id=kwargs.get("message_id"),
            model=model,
            calls=calls,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            duration_ms=kwargs.get("duration_ms"),
        )


def on_tool_call_finished(sender, turn, name, duration_ms, **kwargs) -> None:
    services.usage_record_tool_call(turn=turn, name=name, duration_ms=duration_ms)


def connect() -> None:
    model_usage.connect(on_model_usage, dispatch_uid="usage-model-usage")
    tool_call_finished.connect(on_tool_call_finished, dispatch_uid="usage-tool-call")
