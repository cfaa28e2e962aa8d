"""The Telegram bridge's state in the admin: read-only, since every change goes through the
services (the outbox and the processed updates are the bridge's own bookkeeping)."""

from django.contrib import admin

from bots.models import BotState, LinkCode, OutboundMessage, PairingRequest, ProcessedUpdate
from chats.admin import ReadOnlyAdmin


@admin.register(OutboundMessage)
class OutboundMessageAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "kind",
        "status",
        "telegram_chat_id",
        "thread_id",
        "turn",
        "message_ids",
        "attempts",
        "created_at",
        "delivered_at",
    )
    list_filter = ("kind", "status")
    search_fields = ("telegram_chat_id", "text", "error")


@admin.register(ProcessedUpdate)
class ProcessedUpdateAdmin(ReadOnlyAdmin):
    list_display = ("update_id", "kind", "outcome", "processed_at")
    list_filter = ("kind", "outcome")
    search_fields = ("update_id",)


@admin.register(PairingRequest)
class PairingRequestAdmin(ReadOnlyAdmin):
    list_display = ("display_name", "username", "user_id", "code", "status", "decided_by")
    list_filter = ("status",)
    search_fields = ("display_name", "username", "user_id")


@admin.register(LinkCode)
class LinkCodeAdmin(ReadOnlyAdmin):
    list_display = ("person", "created_at", "expires_at", "used_at", "used_by")
    exclude = ("code_hash",)


@admin.register(BotState)
class BotStateAdmin(ReadOnlyAdmin):
    list_display = ("bot_id", "username", "offset", "updated_at")
