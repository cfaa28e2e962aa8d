"""Bearer-token authentication: `Authorization: Bearer <raw token>` → the token and its Person.

Only the SHA-256 of a token is stored, so a lookup hashes the presented value. Every
failure is a 401 with `WWW-Authenticate: Bearer`, and the API never redirects to a login.
"""

import ipaddress
from datetime import timedelta

from django.http import HttpRequest
from django.utils import timezone

from chats.api.errors import ApiError
from chats.models import ApiToken, hash_api_token
from chats.views_accounts import client_address

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


WRONG_KIND = {
    ApiToken.Kind.INTEGRATION: (
        "This is a personal key: it works only on the OpenAI-compatible endpoints under /v1/. "
        "API v1 takes an integration token."
    ),
    ApiToken.Kind.PERSONAL: (
        "This is an integration token: it works only on API v1 (/api/v1/). The "
        "OpenAI-compatible endpoints take a personal key (create one on your settings page)."
    ),
}


def token_for_raw(raw: str) -> ApiToken | None:
    """The active, unexpired token whose raw value is `raw`, with an active person, or None."""
    if len(raw) > MAX_RAW_TOKEN_LENGTH:
        return None
    token = (
        ApiToken.objects.select_related("person")
        .filter(key_hash=hash_api_token(raw), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.is_active or not token.person.is_active:
        return None
    return token


def authenticate(request: HttpRequest, *, kind: str = ApiToken.Kind.INTEGRATION) -> ApiToken:
    """The active token of `kind` named by the request, with an active `person`; ApiError 401
    for a missing, unknown, revoked or expired one, 403 `wrong_token_kind` for the other kind."""
    token = token_for_raw(_raw_token(request))
    if token is None:
        raise _unauthorized(
            "invalid_token", "The API token is invalid, revoked or expired.", invalid=True
        )
    if token.kind != kind:
        raise ApiError(403, "wrong_token_kind", WRONG_KIND[kind])
    touch(token, request)
    return token


def _ip_or_none(value: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address(value)) if value else None
    except ValueError:  # a proxy header that is not an address: keep nothing rather than it
        return None


def touch(token: ApiToken, request: HttpRequest) -> None:
    """Record when (to the minute) and from which address the token was last used."""
    now = timezone.now()
    stale = now - LAST_USED_PRECISION
    address = _ip_or_none(client_address(request))
    if (
        token.last_used_at is not None
        and token.last_used_at > stale
        and token.last_used_address == address
    ):
        return
    # The filter repeats the staleness test so concurrent requests write at most once.
    ApiToken.objects.filter(pk=token.pk).exclude(
        last_used_at__gt=stale, last_used_address=address
    ).update(last_used_at=now, last_used_address=address)
    token.last_used_at, token.last_used_address = now, address
