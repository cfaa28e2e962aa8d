"""The one place that opens Redis connections for our own keys (interrupt flags, event
sequence numbers and replay buffers). Celery, Channels and the cache have their own.

`guarded()` runs an operation with a circuit breaker: when Redis is down, callers get a
default at once for a few seconds instead of each waiting for a connect timeout, and the
outage is logged once, not on every call.
"""

import logging
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import TypeVar

import redis
from django.conf import settings

logger = logging.getLogger(__name__)
T = TypeVar("T")
# How long callers get the default without trying Redis after a failure. Short, because the
# interrupt check of a running turn is one of them: a newer message's interrupt is seen only
# after this window, so it bounds how long a chat waits after Redis is back (the fault suite
# measured ~4.2 s with 5 s). Long enough that an unreachable host (1 s connect timeout)
# costs a caller at most a third of its time.
RETRY_AFTER_SECONDS = 2.0


@lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_connect_timeout=1, socket_timeout=5, health_check_interval=30
    )


def get_redis() -> redis.Redis:
    """A shared client for REDIS_URL (connections are pooled and opened lazily)."""
    return _client(settings.REDIS_URL)


class _Breaker:
    def __init__(self):
        self.down_until = 0.0
        self.lock = threading.Lock()

    def call(self, operation: Callable[[redis.Redis], T], default: T, what: str) -> T:
        if time.monotonic() < self.down_until:
            return default
        try:
            result = operation(get_redis())
        except (redis.RedisError, OSError) as exc:
            with self.lock:
                first = self.down_until == 0.0
                self.down_until = time.monotonic() + RETRY_AFTER_SECONDS
            if first:
                logger.warning("Redis unavailable (%s): %s; degrading until it is back", what, exc)
            return default
        self.mark_up()
        return result

    def mark_up(self) -> None:
        if self.down_until:
            self.down_until = 0.0
            logger.info("Redis is reachable again")


_breaker = _Breaker()


def guarded[T](operation: Callable[[redis.Redis], T], *, default: T, what: str) -> T:
    """Run `operation(client)`; on a Redis failure return `default` (and skip Redis for a few
    seconds). Use for best-effort features only: never for data that must not be lost."""
    return _breaker.call(operation, default, what)
