from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "attachments"
    verbose_name = "Attachments (files on messages)"

    def ready(self) -> None:
        from django.conf import settings

        from attachments.extraction.processor import (
            PROCESSOR_NAME,
            extract_document,
            wants_document,
        )
        from attachments.extraction.tools import attachment_tools
        from attachments.processing import processor_register
        from attachments.render import attachments_extras
        from chats.agent.registry import register_tool_provider
        from chats.extras import register_message_extras
        from hermes_site.body_limits import body_limit_register

        register_message_extras("attachments", attachments_extras, default=list)
        # Multipart posts carry files: their path may send more than the API's JSON bodies.
        body_limit_register("/api/v1/uploads/", settings.ATTACHMENTS_API_MAX_BODY_BYTES)
        # Documents' text, read off the request path in a bounded child (docs/FILES.md).
        processor_register(PROCESSOR_NAME, wants=wants_document, run=extract_document)
        register_tool_provider(attachment_tools)
