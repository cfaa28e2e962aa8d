"""The admin of schedules: schedules with their run history (not added here: the services
make them), runs (read-only: every record stays as the dispatcher wrote it). The
dispatcher's heartbeat is under Operations."""

from django.contrib import admin

from schedules.models import Schedule, ScheduleRun


class ScheduleRunInline(admin.TabularInline):
    model = ScheduleRun
    extra = 0
    can_delete = False
    ordering = ["-slot_at"]
    fields = ["slot_at", "status", "reason", "turn", "lateness_seconds", "error", "delivered_to"]
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("turn")


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "chat",
        "owner",
        "kind",
        "cron",
        "interval_minutes",
        "timezone",
        "enabled",
        "paused_reason",
        "next_fire_at",
        "consecutive_failures",
    ]
    list_filter = ["enabled", "approval", "kind", "catch_up", "mode"]
    search_fields = ["prompt", "chat__chat_key", "owner__username"]
    raw_id_fields = ["chat", "owner"]
    list_select_related = ["chat", "owner"]
    # Timing changes go through the services (validation, next slot); the admin shows them.
    # So do pause and resume: ticking `enabled` here kept the next slot of before the pause,
    # and the next pass recorded the whole pause as "missed" (staff resume on the pages).
    readonly_fields = [
        "enabled",
        "kind",
        "cron",
        "interval_minutes",
        "run_at",
        "timezone",
        "next_fire_at",
        "consecutive_failures",
        "anchor_at",
        "created_at",
        "updated_at",
        "paused_at",
        # A chat admin decides an agent-made schedule (schedules.proposals), not the admin.
        "approval",
        "approval_by",
        "approval_at",
    ]
    inlines = [ScheduleRunInline]

    def has_add_permission(self, request) -> bool:
        # Made through the services only (the pages, `manage.py schedule add`, the agent's
        # tool): an admin-added row skips the checks and has no next slot, so it never fires.
        return False


@admin.register(ScheduleRun)
class ScheduleRunAdmin(admin.ModelAdmin):
    list_display = ["id", "schedule", "slot_at", "status", "lateness_seconds", "turn", "error"]
    list_filter = ["status"]
    raw_id_fields = ["schedule", "trigger", "turn"]
    list_select_related = ["schedule", "turn"]
    readonly_fields = [f.name for f in ScheduleRun._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False
