"""Files a tool returned beside its text (a tool server's MCP images and binary resources)
become attachments of the tool result message: the engine's tool files store
(`chats.agent.registry.register_tool_files_store`, registered in AttachmentsConfig.ready()).

Each is stored like any file (`attachment_store`: sniffed from its bytes, the name cleaned,
the per-file, per-message and per-chat-day limits, one blob per SHA-256), on the tool result
message, so it belongs to the turn's chat and only the chat's readers may download it. The
message then carries it to the model like a person's file (`attachments.to_model`): the
loop puts it in a labelled user message after the step (Chat Completions takes no images in
tool messages). A refused file is told to the model with the reason.
"""

import logging

from attachments.services import AttachmentRefused, attachment_store
from chats.agent.registry import ToolFile, TurnContext
from chats.models import Message

logger = logging.getLogger(__name__)


def tool_files_store(
    context: TurnContext, message: Message, files: tuple[ToolFile, ...]
) -> list[str]:
    """Store `files` on the tool result `message`; a line for each file not kept."""
    lines = []
    for file in files:
        try:
            attachment_store(
                message=message, name=file.name, data=file.data, declared_type=file.declared_type
            )
        except AttachmentRefused as exc:
            lines.append(f"{file.name} was not kept: {exc}")
    return lines
