"""Sliding one-minute rate limits counted in the Django cache (Redis), shared by the API
(per token) and the dashboard composer and uploads (per person).

A limit of N per minute holds over any 60 seconds, not only within a clock minute: the
count is this clock minute's requests plus last minute's weighted by how much of it still
lies within the last 60 seconds (a sliding-window counter, two cache keys per client). A
fixed window would let 2N through around a minute's turn: with a limit of one, a post at
12:00:59 and another at 12:01:00. A refused request is not counted, so a client retrying
too early does not push its own wait further out.

When the cache is unreachable a limit fails open with a logged warning: an outage of Redis
must not take the hub down with it.
"""

import contextlib
import logging
import math
import time

from django.core.cache import cache

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
# A counter lives through its own minute and the next, where it is the weighted "previous";
# the margin covers clock skew between web processes.
COUNTER_TIMEOUT = WINDOW_SECONDS * 2 + 10
# Floating-point slack: 3 * (1 - 20/60) + 1 must count as 3, not 3.0000000000000004.
EPSILON = 1e-9


def now_seconds() -> float:
    """The clock of the windows (a seam for tests)."""
    return time.time()


def _count_request(current_key: str, previous_key: str) -> tuple[int, int]:
    """(this minute's count with this request, last minute's count) in one round trip to
    Redis: INCR makes a missing counter 1, EXPIRE keeps it through the next minute, GET reads
    last minute's. Through the Django cache's own Redis client and key names, so its
    settings (and its outage) are the limit's; the cache API alone took four round trips
    (add, then exists and incr, then get)."""
    current = cache.make_and_validate_key(current_key)
    pipe = cache._cache.get_client(current, write=True).pipeline()
    pipe.incr(current)
    pipe.expire(current, COUNTER_TIMEOUT)
    pipe.get(cache.make_and_validate_key(previous_key))
    count, _, previous = pipe.execute()
    return int(count), int(previous or 0)


def _uncount_request(key: str) -> None:
    with contextlib.suppress(ValueError):  # expired meanwhile: nothing left to take back
        cache.decr(key)


def seconds_until_allowed(*, previous: int, current: int, limit: int, elapsed: float) -> int:
    """Whole seconds (at least 1) until one more request fits, given last minute's count
    `previous`, this minute's `current` and `elapsed` seconds into this minute."""
    # Within this minute, last minute's weight (1 - t/W) falls until previous's share fits.
    room = limit - current - 1
    if previous and room >= 0:
        at = WINDOW_SECONDS * (1 - room / previous)
        if at < WINDOW_SECONDS:
            return max(1, math.ceil(at - elapsed - EPSILON))
    # Otherwise in the next minute, where this minute's count becomes the weighted one.
    share = 0.0 if current <= limit - 1 else 1 - (limit - 1) / current
    return max(1, math.ceil(WINDOW_SECONDS - elapsed + share * WINDOW_SECONDS - EPSILON))


def window_retry_after(*, scope: str, key: str, limit: int) -> int | None:
    """Count one request of `key` in `scope` (e.g. "api", "web-post") against `limit` per
    sliding minute; None when it fits, else the seconds to wait (the request is then not
    counted). A `limit` of 0 disables it. Fails open (None, with a warning) when the cache
    is unreachable."""
    if not limit:
        return None
    now = now_seconds()
    window = int(now // WINDOW_SECONDS)
    elapsed = now - window * WINDOW_SECONDS
    current_key = f"{scope}-rate:{key}:{window}"
    try:
        count, previous = _count_request(current_key, f"{scope}-rate:{key}:{window - 1}")
        if previous * (1 - elapsed / WINDOW_SECONDS) + count <= limit + EPSILON:
            return None
        _uncount_request(current_key)
    except Exception as exc:  # any cache/Redis failure: fail open, never 500
        logger.warning("%s rate limit not enforced: the cache is unavailable (%s)", scope, exc)
        return None
    return seconds_until_allowed(previous=previous, current=count - 1, limit=limit, elapsed=elapsed)
