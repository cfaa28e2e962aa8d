"""When and how long to wait before asking a model server again.

Exponential backoff with full jitter (a uniformly random delay up to `base * 2**attempt`,
capped), except when the server names its own wait in `Retry-After` (429, 503), which is
honoured up to the same cap. The sleep and the random source are injected so that tests
record delays instead of waiting.
"""

import email.utils
import random as random_module
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Statuses worth asking again: the server timed out, is rate limiting or is failing.
RETRYABLE_STATUSES = frozenset({408, 429})


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds the server asked us to wait (`Retry-After-Ms`, `Retry-After` as seconds or as
    an HTTP date), or None when it did not say or said something unreadable."""
    if not headers:
        return None
    lowered = {str(key).lower(): str(value).strip() for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if moment is None:
            return None
        return max(0.0, moment.timestamp() - now())
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN / infinity
        return None
    return max(0.0, seconds)


@dataclass
class RetryPolicy:
    """At most `max_retries` retries; delays grow from `base_seconds`, never above
    `max_seconds`."""

    max_retries: int = 3
    base_seconds: float = 1.0
    max_seconds: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    random: Callable[[], float] = random_module.random

    def can_retry(self, attempt: int) -> bool:
        """`attempt` counts from 0 for the first request."""
        return attempt < self.max_retries

    def delay(self, attempt: int, *, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (0-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_seconds)
        ceiling = min(self.max_seconds, self.base_seconds * (2 ** min(attempt, 30)))
        return max(0.0, min(ceiling, self.random() * ceiling))
