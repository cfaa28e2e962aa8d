"""Writes of the operations app: the heartbeats background processes leave behind."""

import socket
from datetime import datetime

from django.utils import timezone

from operations.models import Heartbeat


def heartbeat_beat(*, name: str, host: str | None = None, now: datetime | None = None) -> None:
    """Record that process `name` on `host` (default: this machine) is alive at `now`: one
    row per (name, host), updated in place, so the table never grows with time."""
    host = (host if host is not None else socket.gethostname())[:255]
    now = now or timezone.now()
    if not Heartbeat.objects.filter(name=name, host=host).update(beat_at=now):
        Heartbeat.objects.update_or_create(name=name, host=host, defaults={"beat_at": now})


def heartbeat_stop(*, name: str, host: str) -> None:
    """Forget the heartbeat of a process that stopped cleanly, so nobody counts it as alive."""
    Heartbeat.objects.filter(name=name, host=host[:255]).delete()
