"""The learning loop in the admin: every review run, read-only (what triggered it, what it
cost, what it concluded and proposed), and each chat's counters with its own intervals and
quiet-notice switch, which staff may change.

A review's steps and outcome come from the chat's history, which staff read in the
Messages admin already; its proposals link to their own admin pages, where the memory
admin's rules on private entries apply.
"""

import json

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from chats.admin import ReadOnlyAdmin, admin_link
from hermes_site.scanning import reveal_hidden
from learning.models import ChatLearning, Review
from learning.services import chat_learning_update


@admin.register(Review)
class ReviewAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "chat",
        "turn_number",
        "focus",
        "status",
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "duration_ms",
        "created_at",
    )
    list_filter = ("status", "focus")
    list_select_related = ("chat",)
    search_fields = ("chat__chat_key", "chat__title", "outcome", "error")
    date_hierarchy = "created_at"
    fields = (
        "chat",
        "turn",
        "turn_number",
        "focus",
        "status",
        "trigger_counters",
        "covers_after_id",
        "covers_to_id",
        "snapshot_tokens",
        "model",
        "provider",
        "iterations",
        "tool_calls",
        "refused_calls",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "duration_ms",
        "outcome_text",
        "error",
        "proposals",
        "steps_text",
        "created_at",
        "started_at",
        "finished_at",
    )
    readonly_fields = fields

    @admin.display(description="trigger")
    def trigger_counters(self, review: Review) -> str:
        return format_html("<pre>{}</pre>", json.dumps(review.trigger, indent=2))

    @admin.display(description="outcome")
    def outcome_text(self, review: Review) -> str:
        return reveal_hidden(review.outcome)

    @admin.display(description="steps")
    def steps_text(self, review: Review) -> str:
        text = json.dumps(review.steps, ensure_ascii=False, indent=2)
        return format_html("<pre>{}</pre>", reveal_hidden(text))

    @admin.display(description="proposals it made")
    def proposals(self, review: Review) -> str:
        links = [admin_link(entry) for entry in review.memory_entries.all()]
        links += [admin_link(proposal) for proposal in review.skill_proposals.all()]
        if not links:
            return "none"
        return format_html_join(", ", "{}", ((link,) for link in links))


@admin.register(ChatLearning)
class ChatLearningAdmin(admin.ModelAdmin):
    list_display = (
        "chat",
        "user_turns_since_memory_review",
        "iterations_since_skill_review",
        "memory_interval",
        "skill_interval",
        "review_notice",
        "updated_at",
    )
    list_select_related = ("chat",)
    list_filter = ("review_notice",)
    search_fields = ("chat__chat_key", "chat__title")
    fields = (
        "chat",
        "user_turns_since_memory_review",
        "iterations_since_skill_review",
        "memory_interval",
        "skill_interval",
        "review_notice",
        "updated_at",
    )
    readonly_fields = (
        "chat",
        "user_turns_since_memory_review",
        "iterations_since_skill_review",
        "updated_at",
    )

    def has_add_permission(self, request):
        return False  # created with the chat's first completed turn

    def save_model(self, request, obj, form, change):
        # Only the settings, under the row lock: a plain save would write back counters
        # read when the form opened over turns counted since.
        chat_learning_update(
            chat=obj.chat,
            memory_interval=obj.memory_interval,
            skill_interval=obj.skill_interval,
            review_notice=obj.review_notice,
        )

    def has_delete_permission(self, request, obj=None):
        return False
