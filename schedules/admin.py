"""The admin of schedules: schedules with their run history (not added here: the services
make them), runs (read-only: every record stays as the dispatcher wrote it). The
dispatcher's heartbeat is under Operations.

The admin holds to the services' rules (docs/SECURITY.md, "Schedules"): what a schedule
asks, whose it is and where it posts are read-only here for everyone, superusers included
(a run posts the prompt as "scheduled by <owner>" and bills the owner: only the owner
changes the prompt, on the pages; owner and chat never change). What staff may change here
(catch-up, mode) is saved by `schedule_update`, a deletion by `schedule_delete`."""

from django.contrib import admin

from schedules.models import Schedule, ScheduleRun
from schedules.services import schedule_delete, schedule_update

# The only fields the admin writes, each through `schedule_update`.
ADMIN_EDITABLE = ("catch_up", "mode")


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
        # Posted in the owner's name and billed to them: only the owner changes the prompt
        # (on the pages); a schedule keeps its owner and chat.
        "owner",
        "chat",
        "prompt",
        "paused_reason",
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

    def save_model(self, request, obj, form, change) -> None:
        changed = {
            name: form.cleaned_data[name] for name in ADMIN_EDITABLE if name in form.changed_data
        }
        schedule = Schedule.objects.get(pk=obj.pk)  # as stored: the form's instance is edited
        schedule_update(schedule=schedule, by=request.user, **changed)

    def delete_model(self, request, obj) -> None:
        schedule_delete(schedule=obj, by=request.user)

    def delete_queryset(self, request, queryset) -> None:
        for schedule in queryset:
            schedule_delete(schedule=schedule, by=request.user)


@admin.register(ScheduleRun)
class ScheduleRunAdmin(admin.ModelAdmin):
    list_display = ["id", "schedule", "slot_at", "status", "lateness_seconds", "turn", "error"]
    list_filter = ["status"]
    raw_id_fields = ["schedule", "trigger", "turn"]
    list_select_related = ["schedule", "turn"]
    readonly_fields = [f.name for f in ScheduleRun._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        # A run is the dispatcher's record (its slot is claimed once); it goes with its
        # schedule, never on its own.
        return False
