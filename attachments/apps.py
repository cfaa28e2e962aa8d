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
        from attachments.html import attachments_html, composer_html
        from attachments.inbound import json_files_parse, json_files_store
        from attachments.live import attachment_settled_announce
        from attachments.openai_parts import content_part_handler
        from attachments.outbound import message_reply_files, outbound_tools, reply_files_attach
        from attachments.processing import processor_register
        from attachments.render import attachments_extras
        from attachments.search_filters import (
            TEXT_SOURCE,
            has_check,
            has_condition,
            type_check,
            type_condition,
        )
        from attachments.services import CARRIES_NAME
        from attachments.signals import attachment_settled
        from attachments.terminal import attach_command, staged_files_store
        from attachments.to_model import attachments_carried
        from attachments.web import PATH_PREFIX, upload_body_limit
        from chats.agent.registry import (
            message_parts_register,
            register_reply_stored,
            register_tool_files_store,
            register_tool_provider,
        )
        from chats.api.post_fields import PostField, register_post_field
        from chats.extras import (
            register_composer_html,
            register_message_extras,
            register_message_html,
        )
        from chats.history_bundle import register_record_extra
        from chats.reply_files import register_reply_files
        from chats.search_query import register_search_filter
        from chats.search_sources import register_search_text_source
        from chats.slash_commands import register_slash_command
        from chats.staged import register_staged_consumer
        from hermes_site.body_limits import body_limit_register
        from openai_api.content_parts import register_content_part_handler

        register_message_extras("attachments", attachments_extras, default=list)
        register_message_html("attachments", attachments_html)
        register_composer_html("attachments", composer_html)
        attachment_settled.connect(
            attachment_settled_announce, sender=None, dispatch_uid="attachments-live"
        )
        # The search syntax's has:file and type:pdf.
        register_search_filter("has", example="file", check=has_check, condition=has_condition)
        register_search_filter("type", example="pdf", check=type_check, condition=type_condition)
        # A plain search term finds text inside files too (extracted text, descriptions).
        register_search_text_source(TEXT_SOURCE)
        # History exports carry each message's files (bytes in the bundle, by SHA-256).
        register_record_extra(
            "attachments",
            export=attachments_export,
            parse=attachments_parse,
            restore=attachments_restore,
        )
        # The agent's file_send: files wait for the turn's reply and are attached when it is
        # stored; channels (Telegram) send a reply's files through chats.reply_files.
        register_tool_provider(outbound_tools)
        register_reply_stored(reply_files_attach)
        register_reply_files(message_reply_files)
        # Small files as base64 in the JSON message post; images and files in /v1 messages.
        register_post_field(PostField("files", json_files_parse, json_files_store))
        register_content_part_handler(content_part_handler)
        # The terminal's /attach PATH, stored on the next message.
        register_slash_command(attach_command)
        register_staged_consumer("attach", staged_files_store)
        # Telegram's voice notes: "typing…" while transcribed, a failure told, and in a group
        # the transcript decides whether the bot was addressed (before the turn's release).
        from attachments.telegram_voice import on_heard_file_settled, transcribing_chat_actions
        from bots.chat_actions import register_chat_action_source

        register_chat_action_source("transcribing", transcribing_chat_actions)
        attachment_settled.connect(on_heard_file_settled, dispatch_uid="attachments-telegram-heard")
        # The turn waits for its files: the last one to settle lets it go.
        from attachments.waiting import on_attachment_settled

        attachment_settled.connect(on_attachment_settled, dispatch_uid="attachments-turn-waits")
        # Photos, documents, voice notes, audio, video notes and videos sent on Telegram (the
        # bridge's media registry); a file Telegram cannot hand over is recorded as failed.
        from attachments.telegram import telegram_media_take, telegram_media_takes
        from bots.media import register_media_handler

        register_media_handler("attachments", takes=telegram_media_takes, take=telegram_media_take)
        # Multipart posts carry files: their paths may send more than the API's JSON bodies
        # and the dashboard's forms.
        body_limit_register("/api/v1/uploads/", settings.ATTACHMENTS_API_MAX_BODY_BYTES)
        body_limit_register(PATH_PREFIX, upload_body_limit())
        # Documents' text, read off the request path in a bounded child (docs/ATTACHMENTS.md).
        processor_register(PROCESSOR_NAME, wants=wants_document, run=extract_document)
        register_tool_provider(attachment_tools)
        # Images described once by a vision model when the hub's model takes no images.
        processor_register(describe.PROCESSOR_NAME, wants=describe.wants, run=describe.run)
        # Else, with neither, the text in an image read by OCR (beside "you cannot see it").
        from attachments.extraction import image_text

        processor_register(
            image_text.PROCESSOR_NAME,
            wants=image_text.wants_image_text,
            run=image_text.read_image_text,
        )
        # How files reach the model: asked by the context builder for messages that carry any.
        message_parts_register(CARRIES_NAME, attachments_carried)
        # Images and files a tool returned (a tool server's MCP content) become attachments
        # of the tool result, which the model sees after the step.
        from attachments.tool_files import tool_files_store

        register_tool_files_store(tool_files_store)
        # Memory and skill proposals drawn from a file name it as their source.
        from attachments.provenance import files_behind
        from chats.work_sources import register_work_sources

        register_work_sources("attachments", files_behind)
