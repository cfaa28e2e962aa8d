"""Per-token rate limit: a fixed one-minute window counted in the Django cache (Redis).

`API_RATE_LIMIT_PER_MINUTE` requests per token and clock minute; 0 disables the limit.
When the cache is unreachable the limit fails open with a logged warning: an outage of
Redis must not take the API down with it.
"""

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

from chats.api.errors import ApiError
from chats.models import ApiToken

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


def rate_limit_check(token: ApiToken) -> None:
    """Count one request of `token`; ApiError 429 with Retry-After once the window is full."""
    limit = settings.API_RATE_LIMIT_PER_MINUTE
    if not limit:
        return
    now = now_seconds()
    window = int(now // WINDOW_SECONDS)
    key = f"api-rate:{token.key_hash}:{window}"
    try:
        count = _count_request(key)
    except Exception as exc:  # any cache/Redis failure: fail open, never 500
        logger.warning("API rate limit not enforced: the cache is unavailable (%s)", exc)
        return
    if count > limit:
        retry_after = max(1, math.ceil((window + 1) * WINDOW_SECONDS - now))
        raise ApiError(
            429,
            "rate_limited",
            f"Rate limit of {limit} requests per minute exceeded; retry in {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )


def window_retry_after(*, scope: str, key: str, limit: int) -> int | None:
    """Count one request of `key` in `scope` (e.g. the dashboard composer) in the same
    one-minute windows; the seconds to wait once the window is full, else None. Fails open
    (None, with a warning) when the cache is unreachable, like the API's limit."""
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
