from django.db import models


class Heartbeat(models.Model):
    """When a background process last said it is alive: one row per (name, host).

    "dispatcher": the schedules' dispatcher (beat, through the default queue); "worker": each
    Celery worker's heartbeat thread, `host` being its node name (e.g. celery@web-1)."""

    name = models.CharField(max_length=64)
    host = models.CharField(max_length=255, blank=True, default="")
    beat_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "host"], name="heartbeat_one_per_name_host")
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.host or '?'} at {self.beat_at:%Y-%m-%d %H:%M:%S}"
