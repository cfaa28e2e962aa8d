"""Bearer-token authentication: `Authorization: Bearer <raw token>` → the token and its Person.

Only the SHA-256 of a token is stored, so a lookup hashes the presented value. Every
failure is a 401 with `WWW-Authenticate: Bearer`, and the API never redirects to a login.
"""

from datetime import timedelta

from django.http import HttpRequest
from django.utils import timezone

from chats.api.errors import ApiError
from chats.models import ApiToken, hash_api_token

# Writing last_used_at on every request would turn every read into a write; a minute of
# precision is enough to see which tokens are alive.
LAST_USED_PRECISION = timedelta(minutes=1)
MAX_RAW_TOKEN_LENGTH = 200


def _unauthorized(code: str, message: str, *, invalid: bool) -> ApiError:
    challenge = 'Bearer realm="api"'
    if invalid:
        challenge += ', error="invalid_token"'
    return ApiError(401, code, message, headers={"WWW-Authenticate": challenge})


def _raw_token(request: HttpRequest) -> str:
    header = request.headers.get("Authorization", "").strip()
    if not header:
        raise _unauthorized(
            "missing_token", "Send an API token as 'Authorization: Bearer <token>'.", invalid=False
        )
    scheme, _, raw = header.partition(" ")
    raw = raw.strip()
    if scheme.lower() != "bearer" or not raw or " " in raw:
        raise _unauthorized(
            "invalid_token",
            "The Authorization header must be 'Bearer <token>'.",
            invalid=True,
        )
    return raw


def authenticate(request: HttpRequest) -> ApiToken:
    """The active token named by the request, with an active `person`, or ApiError 401."""
    raw = _raw_token(request)
    token = None
    if len(raw) <= MAX_RAW_TOKEN_LENGTH:
        token = (
            ApiToken.objects.select_related("person")
            .filter(key_hash=hash_api_token(raw), revoked_at__isnull=True)
            .first()
        )
    if token is None or not token.person.is_active:
        raise _unauthorized(
            "invalid_token", "The API token is invalid, revoked or expired.", invalid=True
        )
    _touch(token)
    return token


def _touch(token: ApiToken) -> None:
    now = timezone.now()
    stale = now - LAST_USED_PRECISION
    if token.last_used_at is not None and token.last_used_at > stale:
        return
    # The filter repeats the staleness test so concurrent requests write at most once.
    ApiToken.objects.filter(pk=token.pk).exclude(last_used_at__gt=stale).update(last_used_at=now)
    token.last_used_at = now
