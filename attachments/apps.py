from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "attachments"
    verbose_name = "Attachments (files on messages)"

    def ready(self) -> None:
        from django.conf import settings

        from attachments import describe
        from attachments.extraction.processor import (
            PROCESSOR_NAME,
            extract_document,
            wants_document,
        )
        from attachments.extraction.tools import attachment_tools
        from attachments.history import attachments_export, attachments_parse, attachments_restore
        from attachments.processing import processor_register
        from attachments.render import attachments_extras
        from attachments.search_filters import has_check, has_condition, type_check, type_condition
        from attachments.services import CARRIES_NAME
        from attachments.to_model import attachments_carried
        from chats.agent.registry import message_parts_register, register_tool_provider
        from chats.extras import register_message_extras
        from chats.history_bundle import register_record_extra
        from chats.search_query import register_search_filter
        from hermes_site.body_limits import body_limit_register

        register_message_extras("attachments", attachments_extras, default=list)
        # The search syntax's has:file and type:pdf.
        register_search_filter("has", example="file", check=has_check, condition=has_condition)
        register_search_filter("type", example="pdf", check=type_check, condition=type_condition)
        # History exports carry each message's files (bytes in the bundle, by SHA-256).
        register_record_extra(
            "attachments",
            export=attachments_export,
            parse=attachments_parse,
            restore=attachments_restore,
        )
        # The turn waits for its files: the last one to settle lets it go.
        from attachments.signals import attachment_settled
        from attachments.waiting import on_attachment_settled

        attachment_settled.connect(on_attachment_settled, dispatch_uid="attachments-turn-waits")
        # Photos and documents sent on Telegram (the bridge's media registry).
        from attachments.telegram import telegram_media_take, telegram_media_takes
        from bots.media import register_media_handler

        register_media_handler("attachments", takes=telegram_media_takes, take=telegram_media_take)
        # Multipart posts carry files: their path may send more than the API's JSON bodies.
        body_limit_register("/api/v1/uploads/", settings.ATTACHMENTS_API_MAX_BODY_BYTES)
        # Documents' text, read off the request path in a bounded child (docs/FILES.md).
        processor_register(PROCESSOR_NAME, wants=wants_document, run=extract_document)
        register_tool_provider(attachment_tools)
        # Images described once by a vision model when the hub's model takes no images.
        processor_register(describe.PROCESSOR_NAME, wants=describe.wants, run=describe.run)
        # How files reach the model: asked by the context builder for messages that carry any.
        message_parts_register(CARRIES_NAME, attachments_carried)
