"""Reads of the operations app: heartbeats and who may scrape the metrics."""

from datetime import datetime, timedelta
from hmac import compare_digest

from django.conf import settings
from django.utils import timezone

from operations.models import Heartbeat


def heartbeat_latest(*, name: str) -> datetime | None:
    """When any process called `name` last beat (None: never)."""
    return (
        Heartbeat.objects.filter(name=name)
        .order_by("-beat_at")
        .values_list("beat_at", flat=True)
        .first()
    )


def heartbeats_fresh(*, name: str, within: timedelta, now: datetime | None = None) -> list[str]:
    """The hosts whose `name` process beat within `within` of `now`."""
    since = (now or timezone.now()) - within
    return list(
        Heartbeat.objects.filter(name=name, beat_at__gte=since)
        .order_by("host")
        .values_list("host", flat=True)
    )


def worker_stale_after() -> timedelta:
    """How long a worker may stay silent before readiness counts it as gone: four beats."""
    return timedelta(seconds=max(30.0, 4 * settings.WORKER_HEARTBEAT_SECONDS))


def metrics_scrape_allowed(*, authorization: str) -> bool:
    """Whether an `Authorization` header carries METRICS_TOKEN as a bearer token (compared
    in constant time). False whenever METRICS_TOKEN is unset: nobody may scrape then."""
    token = settings.METRICS_TOKEN
    if not token:
        return False
    scheme, _, sent = authorization.partition(" ")
    if scheme.lower() != "bearer" or not sent.strip():
        return False
    return compare_digest(sent.strip().encode(), token.encode())
