"""What the knowledge app hangs on the rest of the hub beyond its tool and prompt section:
citations in replies (stored with the reply, rendered per reader on the dashboard, the
HTTP API and /v1, as text on Telegram), the "add to a collection" control under a chat's
files for maintainers, and the `knowledge_add` tool. Called once from KnowledgeConfig.ready()."""

from django.conf import settings

UPLOAD_PREFIX = "/knowledge/upload/"


def connect() -> None:
    from chats.agent.registry import register_reply_stored, register_tool_provider
    from chats.extras import (
        register_message_body,
        register_message_html,
        register_message_text,
        register_outbound_text,
    )
    from hermes_site.body_limits import body_limit_register
    from knowledge import uploads  # noqa: F401 - its task, for the worker
    from knowledge.chat_files import add_tools, files_html
    from knowledge.citations import (
        citations_body_html,
        citations_draft_text,
        citations_outbound_draft,
        citations_outbound_text,
        citations_record,
        citations_text_for_person,
    )

    register_reply_stored(citations_record)
    register_message_body("knowledge", citations_body_html)
    register_outbound_text("knowledge", citations_outbound_text, draft=citations_outbound_draft)
    register_message_text("knowledge", citations_text_for_person, draft=citations_draft_text)
    register_message_html("knowledge", files_html, per_person=True)
    register_tool_provider(add_tools)
    # A folder upload's body: its bytes plus the form's own (paths, boundaries).
    body_limit_register(UPLOAD_PREFIX, settings.KNOWLEDGE_UPLOAD_MAX_BYTES + 1024 * 1024)
