"""Django admin for chats: actors, chats, members, read-only history and turns, API tokens.

History is append-only: messages and their edits can be viewed and searched here, never
added, changed or deleted. Turns change status only in their services, so they are
read-only here too. API tokens are created through `chats.services.api_token_create`
and their raw value is shown once, in the response to the form, and stored nowhere.
"""

import json

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html
from django.utils.text import Truncator

from chats.keys import InvalidKey, validate_channel, validate_id
from chats.models import (
    Actor,
    ApiToken,
    Channel,
    Chat,
    ChatMember,
    Message,
    MessageEdit,
    Turn,
)
from chats.prompt_report import render_prompt_report
from chats.services import api_token_create, api_token_revoke

SHORT_TEXT = 80


def _short(text: str) -> str:
    return Truncator(" ".join(text.split())).chars(SHORT_TEXT)


def _pretty_json(value) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, ensure_ascii=False, indent=2))


def admin_link(obj, label=None) -> str:
    """A link to `obj`'s admin page, or its plain (escaped) label when it has none."""
    if obj is None:
        return "—"
    label = str(obj) if label is None else label
    meta = obj._meta
    try:
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    except NoReverseMatch:
        return format_html("{}", label)
    return format_html('<a href="{}">{}</a>', url, label)


class ChannelFilter(admin.SimpleListFilter):
    """Channel choices from the vocabulary, so the filter costs no DISTINCT scan."""

    title = "channel"
    parameter_name = "channel"
    field_path = "channel"

    def lookups(self, request, model_admin):
        return Channel.choices

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(**{self.field_path: self.value()})
        return queryset


class ChatChannelFilter(ChannelFilter):
    field_path = "chat__channel"


class NoWrites:
    """Nobody, not even a superuser, adds, changes or deletes through this admin."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(NoWrites, admin.ModelAdmin):
    """View and search only."""


class ReadOnlyInline(NoWrites, admin.TabularInline):
    extra = 0
    can_delete = False


# --- actors -----------------------------------------------------------------------------


class ActorAdminForm(forms.ModelForm):
    class Meta:
        model = Actor
        fields = ("channel", "external_id", "display_name", "person")

    def clean_channel(self):
        try:
            return validate_channel(self.cleaned_data["channel"])
        except InvalidKey as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_external_id(self):
        try:
            return validate_id(self.cleaned_data["external_id"], "external user id")
        except InvalidKey as exc:
            raise forms.ValidationError(str(exc)) from exc


@admin.register(Actor)
class ActorAdmin(admin.ModelAdmin):
    form = ActorAdminForm
    list_display = ("display_name", "channel", "external_id", "person", "created_at")
    list_filter = (ChannelFilter, ("person", admin.EmptyFieldListFilter))
    list_select_related = ("person",)
    search_fields = ("display_name", "external_id", "person__username")
    autocomplete_fields = ("person",)
    ordering = ("channel", "external_id")

    def get_readonly_fields(self, request, obj=None):
        # The (channel, external id) pair is the identity ingestion looks actors up by.
        if obj is None:
            return ("created_at", "updated_at")
        return ("channel", "external_id", "created_at", "updated_at")

    def get_fields(self, request, obj=None):
        return ("channel", "external_id", "display_name", "person", "created_at", "updated_at")


# --- chats and members ------------------------------------------------------------------


class ChatMemberInline(admin.TabularInline):
    model = ChatMember
    extra = 0
    fields = ("person", "role", "created_at")
    readonly_fields = ("created_at",)
    autocomplete_fields = ("person",)


@admin.register(Chat)
class ChatAdmin(admin.ModelAdmin):
    list_display = (
        "chat_key",
        "title",
        "channel",
        "kind",
        "last_activity_at",
        "message_count",
    )
    list_filter = (ChannelFilter, "kind", "busy_mode")
    search_fields = ("chat_key", "title", "external_id")
    fields = (
        "chat_key",
        "channel",
        "external_id",
        "thread_id",
        "kind",
        "title",
        "busy_mode",
        "created_at",
        "last_activity_at",
        "message_count",
    )
    readonly_fields = (
        "chat_key",
        "channel",
        "external_id",
        "thread_id",
        "created_at",
        "last_activity_at",
        "message_count",
    )
    inlines = (ChatMemberInline,)

    def get_queryset(self, request):
        # A correlated count per row (served by the (chat, id) index), not one query per row.
        per_chat = (
            Message.objects.filter(chat=OuterRef("pk"))
            .order_by()
            .values("chat")
            .annotate(total=Count("pk"))
            .values("total")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                message_total=Coalesce(Subquery(per_chat, output_field=IntegerField()), Value(0))
            )
        )

    def has_add_permission(self, request):
        # Chats come into being from their channel (first message, room creation).
        return False

    @admin.display(description="messages", ordering="message_total")
    def message_count(self, chat: Chat):
        url = reverse("admin:chats_message_changelist") + f"?chat__id__exact={chat.pk}"
        return format_html('<a href="{}">{}</a>', url, chat.message_total)


@admin.register(ChatMember)
class ChatMemberAdmin(admin.ModelAdmin):
    list_display = ("chat", "person", "role", "created_at")
    list_filter = ("role",)
    list_select_related = ("chat", "person")
    search_fields = ("chat__chat_key", "chat__title", "person__username")
    autocomplete_fields = ("chat", "person")


# --- history (read-only) ----------------------------------------------------------------


class MessageEditInline(ReadOnlyInline):
    model = MessageEdit
    fields = ("previous_text", "new_text", "source_ts", "recorded_at")
    readonly_fields = fields


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("id", "chat", "role", "author", "short_text", "token_count", "created_at")
    list_filter = ("role", ChatChannelFilter, "chat__kind")
    list_select_related = ("chat", "actor")
    search_fields = ("text", "=external_id", "=chat__chat_key")
    date_hierarchy = "created_at"
    ordering = ("-id",)
    # Counting a whole history table on every page view is the slow part of a changelist.
    show_full_result_count = False
    fields = (
        "chat",
        "role",
        "actor",
        "actor_key",
        "external_id",
        "text",
        "parts_json",
        "metadata_json",
        "reply_to",
        "source_ts",
        "created_at",
        "edited_at",
        "token_count",
    )
    readonly_fields = fields
    inlines = (MessageEditInline,)

    @admin.display(description="author", ordering="actor__display_name")
    def author(self, message: Message) -> str:
        return message.actor.display_name if message.actor else "—"

    @admin.display(description="text")
    def short_text(self, message: Message) -> str:
        return _short(message.text)

    @admin.display(description="actor key")
    def actor_key(self, message: Message) -> str:
        return message.actor_key or "—"

    @admin.display(description="structured parts")
    def parts_json(self, message: Message) -> str:
        return _pretty_json(message.parts)

    @admin.display(description="metadata")
    def metadata_json(self, message: Message) -> str:
        return _pretty_json(message.metadata)


@admin.register(MessageEdit)
class MessageEditAdmin(ReadOnlyAdmin):
    list_display = ("id", "message", "short_previous", "short_new", "recorded_at")
    list_select_related = ("message",)
    search_fields = ("previous_text", "new_text", "=message__external_id")
    date_hierarchy = "recorded_at"
    ordering = ("-id",)

    @admin.display(description="before")
    def short_previous(self, edit: MessageEdit) -> str:
        return _short(edit.previous_text)

    @admin.display(description="after")
    def short_new(self, edit: MessageEdit) -> str:
        return _short(edit.new_text)


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "chat",
        "status",
        "model",
        "iterations",
        "prompt_tokens",
        "completion_tokens",
        "latency_ms",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", ChatChannelFilter)
    list_select_related = ("chat",)
    search_fields = ("=chat__chat_key", "model", "error")
    date_hierarchy = "created_at"
    ordering = ("-id",)
    show_full_result_count = False
    exclude = ("prompt_report",)
    readonly_fields = ("prompt_report_summary", "prompt_report_json")

    @admin.display(description="what the model saw")
    def prompt_report_summary(self, turn: Turn) -> str:
        """Tokens per section and, per history message, whether it was included, cut,
        dropped or summarised: the answer to "why did it forget X?"."""
        return render_prompt_report(turn.prompt_report)

    @admin.display(description="prompt report (raw)")
    def prompt_report_json(self, turn: Turn) -> str:
        return _pretty_json(turn.prompt_report)


# --- API tokens -------------------------------------------------------------------------


class TokenStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return (("active", "Active"), ("revoked", "Revoked"))

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = (
        "prefix",
        "kind",
        "person",
        "name",
        "created_at",
        "expires_at",
        "last_used_at",
        "last_used_address",
        "revoked_at",
        "is_active",
    )
    list_filter = (TokenStateFilter, "kind", "created_at")
    list_select_related = ("person",)
    search_fields = ("prefix", "name", "person__username")
    autocomplete_fields = ("person",)
    actions = ("revoke_tokens",)
    token_created_template = "admin/chats/apitoken/token_created.html"

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("person", "kind", "name", "expires_at")
        return (
            "prefix",
            "kind",
            "person",
            "name",
            "created_at",
            "expires_at",
            "last_used_at",
            "last_used_address",
            "revoked_at",
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        # A token never changes hands nor kind; only its label is editable.
        return (
            "prefix",
            "kind",
            "person",
            "created_at",
            "expires_at",
            "last_used_at",
            "last_used_address",
            "revoked_at",
        )

    @admin.display(boolean=True, description="active")
    def is_active(self, token: ApiToken) -> bool:
        return token.is_active

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        token, raw = api_token_create(
            person=obj.person, name=obj.name, kind=obj.kind, expires_at=obj.expires_at
        )
        for model_field in ApiToken._meta.concrete_fields:
            setattr(obj, model_field.attname, getattr(token, model_field.attname))
        obj._state.adding = False
        obj._state.db = token._state.db
        obj.raw_token = raw  # lives on this request's object only; see response_add

    def response_add(self, request, obj, post_url_continue=None) -> HttpResponse:
        """Show the raw token in this response, once; it is not put in messages or sessions."""
        raw = obj.__dict__.pop("raw_token", None)
        if raw is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API token created",
            "token": obj,
            "raw_token": raw,
        }
        response = TemplateResponse(request, self.token_created_template, context)
        add_never_cache_headers(response)
        return response

    @admin.action(description="Revoke selected API tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset) -> None:
        active = list(queryset.filter(revoked_at__isnull=True))
        for token in active:
            api_token_revoke(token=token)
        self.message_user(request, f"Revoked {len(active)} API token(s).", messages.SUCCESS)
