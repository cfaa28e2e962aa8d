"""Readiness: the parts the hub cannot serve without, each checked now and named when it
fails. The reasons are generic (the probe answers anybody); the detail goes to the log."""

import logging
from dataclasses import dataclass

from django.db import connection

from hermes_site.redis import get_redis
from operations.selectors import heartbeats_fresh, worker_stale_after
from operations.worker import WORKER
from schedules.selectors import scheduler_status

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    part: str
    ok: bool
    detail: str


def _database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure means not ready
        logger.warning("readiness: the database is unreachable", exc_info=True)
        return Check("database", False, "unreachable")
    return Check("database", True, "ok")


def _redis() -> Check:
    try:
        get_redis().ping()  # not through the breaker: readiness must see the real state
    except Exception:  # noqa: BLE001
        logger.warning("readiness: Redis is unreachable", exc_info=True)
        return Check("redis", False, "unreachable")
    return Check("redis", True, "ok")


def _workers() -> Check:
    within = worker_stale_after()
    try:
        alive = heartbeats_fresh(name=WORKER, within=within)
    except Exception:  # noqa: BLE001 - the database check names the cause
        return Check("workers", False, "heartbeats unreadable")
    if not alive:
        return Check("workers", False, f"no worker heartbeat in {int(within.total_seconds())} s")
    return Check("workers", True, f"{len(alive)} alive")


def _scheduler() -> Check:
    try:
        status = scheduler_status()
    except Exception:  # noqa: BLE001
        return Check("scheduler", False, "heartbeat unreadable")
    return Check("scheduler", status.alive, "ok" if status.alive else status.message)


def readiness_checks() -> list[Check]:
    """The database, Redis, the Celery workers' heartbeats and the scheduler's (beat's)."""
    return [_database(), _redis(), _workers(), _scheduler()]
