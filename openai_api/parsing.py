"""Reading an OpenAI-style request body: its own size limit, then the fields the hub uses.

Everything is checked before anything is stored. Client-side `tools` (and `tool`-role
messages, which only exist to answer them) are refused: the agent runs its own tools.
"""

import json
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest

from chats.services import IngestError, validate_text
from openai_api.content_parts import ContentPart, accepted_part_types
from openai_api.digests import parts_fingerprint
from openai_api.errors import OpenAIError, bad_request
from openai_api.render import MODEL_ID

CONVERSATION_ROLES = ("user", "assistant")
NOTE_ROLES = ("system", "developer")
CLIENT_TOOLS = ("tools", "functions", "tool_choice", "function_call")
TOOLS_REFUSED = (
    "This endpoint does not run client-side tools: the hub's agent uses its own tools (memory, "
    "skills, the chat's tool servers). Send the request without `{}`."
)


@dataclass(frozen=True)
class ConversationRequest:
    """A validated request: the conversation (role, text) in order, the client's system
    text, the chat it names if any, and how to answer. `parts` are the non-text parts (an
    image, a file) of the last user message: only that message is stored with its files
    (earlier ones were stored with theirs when they were the last)."""

    items: tuple[tuple[str, str], ...]
    system: str
    chat_key: str | None
    stream: bool
    include_usage: bool
    parts: tuple[ContentPart, ...] = ()
    # Per item, what its parts add to its digest ("" for none; openai_api.digests).
    fingerprints: tuple[str, ...] = ()


def read_json(request: HttpRequest) -> dict:
    """The body as a JSON object, refused beyond OPENAI_API_MAX_BODY_BYTES (413)."""
    limit = settings.OPENAI_API_MAX_BODY_BYTES
    too_large = OpenAIError(413, f"The request body must be at most {limit} bytes.")
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise too_large
    # Not request.body: that obeys the global DATA_UPLOAD_MAX_MEMORY_SIZE of API v1, and
    # /v1 clients resend whole conversations, so it has its own, larger limit.
    body = request.read(limit + 1)
    if len(body) > limit:
        raise too_large
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise bad_request(f"The body is not valid JSON: {exc}.") from exc
    if not isinstance(payload, dict):
        raise bad_request("The body must be a JSON object.")
    return payload


TEXT_PART_TYPES = ("text", "input_text", "output_text")


def _content(content: object, param: str) -> tuple[str, list[ContentPart]]:
    """A message's text (its text parts joined by newlines) and its other parts, of the
    types a registered handler takes (openai_api.content_parts); any other part is a 400."""
    if content is None:
        return "", []
    parts: list[ContentPart] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces, others = [], accepted_part_types()
        for index, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            where = f"{param}[{index}]"
            if kind in TEXT_PART_TYPES and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif kind in others:
                parts.append(ContentPart(type=kind, body=part, param=where))
            else:
                accepted = ", ".join(("text", *others))
                raise bad_request(
                    f"{where}: only these content parts are supported: {accepted}.", param=where
                )
        text = "\n".join(pieces)
    else:
        raise bad_request(f"{param} must be a string or a list of content parts.", param=param)
    try:
        return validate_text(text, param), parts
    except IngestError as exc:
        raise bad_request(str(exc), param=param) from exc


def _text(content: object, param: str) -> str:
    """Text alone (instructions): a part that is not text is a 400."""
    text, parts = _content(content, param)
    if parts:
        raise bad_request(f"{parts[0].param}: only text is accepted here.", param=parts[0].param)
    return text


def check_model(payload: dict) -> None:
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model is required.", param="model")
    if model != MODEL_ID:
        raise OpenAIError(
            404,
            f"The model {model!r} does not exist; this hub serves {MODEL_ID!r}.",
            param="model",
            code="model_not_found",
        )


def refuse_client_tools(payload: dict) -> None:
    for name in CLIENT_TOOLS:
        value = payload.get(name)
        if value in (None, [], "none", "auto") and name in ("tool_choice", "function_call"):
            continue
        if value not in (None, []):
            raise bad_request(TOOLS_REFUSED.format(name), param=name, code="tools_not_supported")


CONFLICTING_CHATS = "{} and {} name different chats; name one chat, or the same one in both."


def _chat_key(request: HttpRequest, payload: dict) -> str | None:
    """The chat the header `X-Hermes-Chat` or `metadata.chat` names; both may be sent only
    when they name the same chat (400 `conflicting_chat` otherwise)."""
    metadata = payload.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_request("metadata must be an object.", param="metadata")
    in_metadata = (metadata or {}).get("chat")
    if in_metadata is not None and (not isinstance(in_metadata, str) or not in_metadata.strip()):
        raise bad_request("metadata.chat must be a chat key.", param="metadata.chat")
    in_header = (request.headers.get("X-Hermes-Chat") or "").strip() or None
    in_metadata = in_metadata.strip() if in_metadata else None
    if in_header and in_metadata and in_header != in_metadata:
        raise conflicting_chats("The X-Hermes-Chat header", "metadata.chat", param="metadata.chat")
    return in_header or in_metadata


def conflicting_chats(first: str, second: str, *, param: str) -> OpenAIError:
    return bad_request(
        CONFLICTING_CHATS.format(first, second), param=param, code="conflicting_chat"
    )


def _stream_flags(payload: dict) -> tuple[bool, bool]:
    stream = payload.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("stream must be a boolean.", param="stream")
    options = payload.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad_request("stream_options must be an object.", param="stream_options")
    return stream, bool(options.get("include_usage"))


def _sort_message(message: dict, param: str, items: list, notes: list) -> list[ContentPart]:
    """One message of `messages` / `input` (`param` names it): its text goes to the
    conversation (user, assistant) or to the client's note (system, developer); returns its
    non-text parts (only a user message may have them)."""
    role = message.get("role")
    if role in NOTE_ROLES:
        notes.append(_text(message.get("content"), f"{param}.content"))
        return []
    if role not in CONVERSATION_ROLES:
        raise bad_request(f"{param}.role {role!r} is not supported.", param=f"{param}.role")
    text, parts = _content(message.get("content"), f"{param}.content")
    if parts and role != "user":
        raise bad_request(
            f"{parts[0].param}: only a user message may carry images or files.",
            param=parts[0].param,
        )
    items.append((role, text))
    return parts


def _fingerprint(parts: list[ContentPart]) -> str:
    return parts_fingerprint([part.body for part in parts])


def _last_user_message_ok(items: list, parts: list) -> bool:
    """The conversation ends with a user message that says something: text, or a file."""
    return bool(items) and items[-1][0] == "user" and bool(items[-1][1].strip() or parts)


def parse_chat_completion(request: HttpRequest, payload: dict) -> ConversationRequest:
    """A `POST /v1/chat/completions` body as a ConversationRequest, or OpenAIError 400/404."""
    check_model(payload)
    refuse_client_tools(payload)
    if payload.get("n", 1) != 1:
        raise bad_request("Only n=1 is supported.", param="n")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list.", param="messages")
    items, notes, parts, fingerprints = [], [], [], []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(f"{param} must be an object.", param=param)
        role = message.get("role")
        if role == "tool" or message.get("tool_calls") or message.get("function_call"):
            raise bad_request(TOOLS_REFUSED.format("tool messages"), param=param)
        before = len(items)
        found = _sort_message(message, param, items, notes)
        if len(items) > before:
            parts = found
            fingerprints.append(_fingerprint(found))
    if not _last_user_message_ok(items, parts):
        raise bad_request("The last message must be a non-empty user message.", param="messages")
    stream, include_usage = _stream_flags(payload)
    return ConversationRequest(
        items=tuple(items),
        system="\n\n".join(note for note in notes if note.strip()),
        chat_key=_chat_key(request, payload),
        stream=stream,
        include_usage=include_usage,
        parts=tuple(parts),
        fingerprints=tuple(fingerprints),
    )


def _input_items(value: object) -> tuple[list, list[str], list[ContentPart], list[str]]:
    """The Responses API's `input`: its messages, notes, the last message's parts and each
    message's parts' fingerprint."""
    if isinstance(value, str):
        return [("user", _text(value, "input"))], [], [], [""]
    if not isinstance(value, list) or not value:
        raise bad_request("input must be a string or a non-empty list of messages.", param="input")
    items, notes, parts, fingerprints = [], [], [], []
    for index, item in enumerate(value):
        param = f"input[{index}]"
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise bad_request(
                f"{param}: only message items are supported (the agent runs its own tools).",
                param=param,
            )
        before = len(items)
        found = _sort_message(item, param, items, notes)
        if len(items) > before:
            parts = found
            fingerprints.append(_fingerprint(found))
    return items, notes, parts, fingerprints


@dataclass(frozen=True)
class ResponsesRequest:
    conversation: ConversationRequest
    previous_response_id: str | None


def parse_responses(request: HttpRequest, payload: dict) -> ResponsesRequest:
    """A `POST /v1/responses` body, or OpenAIError 400/404."""
    check_model(payload)
    refuse_client_tools(payload)
    items, notes, parts, fingerprints = _input_items(payload.get("input"))
    instructions = payload.get("instructions")
    if instructions is not None:
        notes.insert(0, _text(instructions, "instructions"))
    if not _last_user_message_ok(items, parts):
        raise bad_request("The input must end with a non-empty user message.", param="input")
    previous = payload.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise bad_request(
            "previous_response_id must be a response id.", param="previous_response_id"
        )
    chat_key = _chat_key(request, payload)
    conversation = payload.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    if conversation is not None:
        if not isinstance(conversation, str) or not conversation:
            raise bad_request("conversation must be a chat key.", param="conversation")
        if previous is not None:
            raise bad_request(
                "Send previous_response_id or conversation, not both.", param="conversation"
            )
        if chat_key is not None and chat_key != conversation.strip():
            raise conflicting_chats(
                "conversation", "X-Hermes-Chat (or metadata.chat)", param="conversation"
            )
        chat_key = conversation
    stream, _ = _stream_flags(payload)
    return ResponsesRequest(
        conversation=ConversationRequest(
            items=tuple(items),
            system="\n\n".join(note for note in notes if note.strip()),
            chat_key=chat_key,
            stream=stream,
            include_usage=True,
            parts=tuple(parts),
            fingerprints=tuple(fingerprints),
        ),
        previous_response_id=previous,
    )
