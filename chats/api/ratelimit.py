"""Per-token rate limit of the API: `API_RATE_LIMIT_PER_MINUTE` requests per token and clock
minute (0 disables it), in the windows of `chats.ratelimit`, failing open without Redis."""

from django.conf import settings

from chats.api.errors import ApiError
from chats.models import ApiToken
from chats.ratelimit import window_retry_after


def rate_limit_check(token: ApiToken) -> None:
    """Count one request of `token`; ApiError 429 with Retry-After once the window is full."""
    limit = settings.API_RATE_LIMIT_PER_MINUTE
    retry_after = window_retry_after(scope="api", key=token.key_hash, limit=limit)
    if retry_after is not None:
        raise ApiError(
            429,
            "rate_limited",
            f"Rate limit of {limit} requests per minute exceeded; retry in {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )
