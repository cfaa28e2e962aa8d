"""Stored messages as the model sees them: OpenAI Chat Completions message dicts.

History is stored raw (seed 003). Everything a model needs around the raw text — the
author's name in shared chats, the note on an interrupted reply, the header of a summary —
is added here, when a request is built, and never stored.

Stored conventions (written by the turn loop):

- user: `text`, `actor` (display name);
- assistant with tool calls: `parts=[{"type": "tool_call", "id", "name", "arguments"}]`;
- tool result: `metadata={"tool_call_id", "tool_name", "is_error", "turn"}`;
- final reply: `metadata={"turn", "interrupted"}`;
- system: a short notice ("a photo arrived"), sent as a user-role note because many chat
  templates accept a system message only at the very start; with `metadata={"notice": …}`
  a notice for people only ("Saved for review: …"), never sent to the model.

An assistant message with tool calls and all of its results form one indivisible group.
"""

import json
from dataclasses import dataclass, field
from functools import lru_cache

from chats.models import Message

NAME_FALLBACK = "someone"
INTERRUPTED_NOTE = "\n\n[This reply was interrupted before it was finished.]"
NOTICE_PREFIX = "[system notice] "
EMPTY_TEXT = "[empty message]"
SUMMARY_HEADER = "Summary of the earlier conversation:\n"
MISSING_TOOL_RESULT = (
    "[No result was recorded for this tool call: the turn stopped before it finished.]"
)

# What is read of each history row (`.values_list(*STORED_FIELDS)`, `StoredMessage.from_row`).
STORED_FIELDS = ("id", "role", "text", "parts", "metadata", "token_count", "actor__display_name")


@dataclass(slots=True)
class StoredMessage:
    """The part of a stored Message the engine needs, read without building model instances."""

    id: int
    role: str
    text: str
    parts: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    token_count: int = 0
    actor_name: str = ""
    # (shared, the fields of its request item): set by the history reader, so a row kept in
    # the worker's row cache is not formatted and counted again on every turn.
    item: tuple | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_row(cls, row: tuple) -> "StoredMessage":
        id_, role, text, parts, metadata, token_count, actor_name = row
        return cls(
            id_,
            role,
            text or "",
            parts if isinstance(parts, list) else [],
            metadata if isinstance(metadata, dict) else {},
            token_count or 0,
            actor_name or "",
        )

    @classmethod
    def from_message(cls, message: Message) -> "StoredMessage":
        actor = message.actor if message.actor_id else None
        return cls(
            message.pk,
            message.role,
            message.text or "",
            message.parts if isinstance(message.parts, list) else [],
            message.metadata if isinstance(message.metadata, dict) else {},
            message.token_count or 0,
            actor.display_name if actor is not None else "",
        )

    @property
    def tool_calls(self) -> list[dict]:
        if self.role != Message.Role.ASSISTANT or not self.parts:
            return []
        return [
            part
            for part in self.parts
            if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id")
        ]

    @property
    def tool_call_id(self) -> str | None:
        if self.role != Message.Role.TOOL:
            return None
        value = self.metadata.get("tool_call_id")
        return str(value) if value else None

    @property
    def turn_id(self) -> int | None:
        value = self.metadata.get("turn")
        return value if isinstance(value, int) else None


@lru_cache(maxsize=4096)
def speaker_prefix(name: str) -> str:
    """`"[Alice] "`: how a shared chat shows the author of a user message to the model.

    Brackets inside the name are dropped so that nobody can close the bracket early and
    pose as someone else."""
    clean = " ".join(name.replace("[", "").replace("]", "").split()) or NAME_FALLBACK
    return f"[{clean}] "


def content_pieces(message: StoredMessage, *, shared: bool) -> tuple[str, str, str]:
    """(prefix, body, suffix) of the content the model sees; the body is the stored text.

    Kept apart so that the body can be cut and its cached token count reused."""
    role = message.role
    if role == Message.Role.USER:
        prefix = speaker_prefix(message.actor_name) if shared else ""
        return prefix, message.text or EMPTY_TEXT, ""
    if role == Message.Role.SYSTEM:
        return NOTICE_PREFIX, message.text or EMPTY_TEXT, ""
    if role == Message.Role.ASSISTANT and message.metadata.get("interrupted"):
        return "", message.text, INTERRUPTED_NOTE
    return "", message.text, ""


def openai_role(message: StoredMessage) -> str:
    if message.role in (Message.Role.ASSISTANT, Message.Role.TOOL):
        return message.role
    return "user"  # user messages and system notices


def openai_tool_calls(message: StoredMessage) -> list[dict]:
    """The `tool_calls` entries of an assistant message, arguments as the raw JSON text."""
    calls = []
    for part in message.tool_calls:
        arguments = part.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            {
                "id": str(part["id"]),
                "type": "function",
                "function": {"name": str(part.get("name", "")), "arguments": arguments},
            }
        )
    return calls


def message_extras(message: StoredMessage, *, tool_call_id: str | None = None) -> dict:
    """The non-content keys of the OpenAI message: `tool_calls` or `tool_call_id`."""
    if message.role == Message.Role.ASSISTANT and message.tool_calls:
        return {"tool_calls": openai_tool_calls(message)}
    if message.role == Message.Role.TOOL:
        return {"tool_call_id": tool_call_id or message.tool_call_id or ""}
    return {}


def to_openai(message: StoredMessage, *, shared: bool) -> dict:
    """One stored message as an OpenAI message dict (no budget, no cutting)."""
    prefix, body, suffix = content_pieces(message, shared=shared)
    result = {"role": openai_role(message), "content": prefix + body + suffix}
    result.update(message_extras(message))
    return result


def missing_result_message(call_id: str) -> dict:
    """A stand-in result for a tool call whose result was never stored (an interrupted turn):
    providers reject a tool call without a result."""
    return {"role": "tool", "content": MISSING_TOOL_RESULT, "tool_call_id": call_id}


def flatten_tool_group(call: StoredMessage, results: list[StoredMessage]) -> str:
    """A tool group as plain assistant text, for providers that cannot take tool messages."""
    by_id = {result.tool_call_id: result for result in results}
    lines = [call.text] if call.text else []
    for entry in openai_tool_calls(call):
        function = entry["function"]
        result = by_id.get(entry["id"])
        outcome = result.text if result is not None else MISSING_TOOL_RESULT
        failed = " (failed)" if result is not None and result.metadata.get("is_error") else ""
        lines.append(f"[used tool {function['name']}({function['arguments']}){failed}: {outcome}]")
    return "\n".join(lines)


def transcript_line(message: StoredMessage, *, agent_name: str) -> str:
    """One message as a line of the plain transcript the summariser reads."""
    role = message.role
    if role == Message.Role.USER:
        return f"{message.actor_name or NAME_FALLBACK}: {message.text}"
    if role == Message.Role.SYSTEM:
        return f"[notice] {message.text}"
    if role == Message.Role.TOOL:
        name = message.metadata.get("tool_name") or "tool"
        verb = "failed" if message.metadata.get("is_error") else "returned"
        return f"(tool {name} {verb}: {message.text})"
    calls = openai_tool_calls(message)
    if calls:
        used = "; ".join(
            f"{call['function']['name']}({call['function']['arguments']})" for call in calls
        )
        text = f"{message.text} " if message.text else ""
        return f"{agent_name}: {text}(called {used})"
    note = " [interrupted]" if message.metadata.get("interrupted") else ""
    return f"{agent_name}: {message.text}{note}"


def tool_call_step(text: str, calls) -> dict:
    """An assistant step that calls tools (`llm.base.ToolCall`s), as the model's API takes
    it back in the next request."""
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ],
    }
