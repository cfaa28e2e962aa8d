"""Fixed one-minute rate-limit windows counted in the Django cache (Redis), shared by the
API (per token) and the dashboard composer (per person).

When the cache is unreachable a limit fails open with a logged warning: an outage of Redis
must not take the hub down with it.
"""

import logging
import math
import time

from django.core.cache import cache

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60


def now_seconds() -> float:
    """The clock of the windows (a seam for tests)."""
    return time.time()


def _count_request(key: str) -> int:
    # add() is a no-op when the key exists; the timeout outlives the window so a late
    # increment never resurrects an expired counter with a short life.
    cache.add(key, 0, timeout=WINDOW_SECONDS * 2)
    try:
        return cache.incr(key)
    except ValueError:
        # The key expired between add() and incr(): this request opens the window.
        cache.set(key, 1, timeout=WINDOW_SECONDS * 2)
        return 1


def window_retry_after(*, scope: str, key: str, limit: int) -> int | None:
    """Count one request of `key` in `scope` (e.g. "api", "web-post") in the current
    one-minute window; the seconds to wait once the window is full, else None. A `limit` of
    0 disables it. Fails open (None, with a warning) when the cache is unreachable."""
    if not limit:
        return None
    now = now_seconds()
    window = int(now // WINDOW_SECONDS)
    try:
        count = _count_request(f"{scope}-rate:{key}:{window}")
    except Exception as exc:  # any cache/Redis failure: fail open, never 500
        logger.warning("%s rate limit not enforced: the cache is unavailable (%s)", scope, exc)
        return None
    if count <= limit:
        return None
    return max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
