"""The heartbeats, read-only: they are written by the processes themselves."""

from django.contrib import admin

from operations.models import Heartbeat


@admin.register(Heartbeat)
class HeartbeatAdmin(admin.ModelAdmin):
    list_display = ["name", "host", "beat_at"]
    readonly_fields = ["name", "host", "beat_at"]

    def has_add_permission(self, request) -> bool:
        return False
