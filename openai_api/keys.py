"""A person's own personal keys: create, list and revoke, only ever their own.

The raw key is returned once by `personal_key_create` and never stored (only its SHA-256,
in `chats.ApiToken` with kind `personal`). Staff see and revoke everyone's in the admin.
"""

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from chats.models import ApiToken
from chats.services import api_token_create, api_token_revoke

MAX_ACTIVE_KEYS = 20


class KeyLimitReached(Exception):
    """The person already holds MAX_ACTIVE_KEYS active keys."""


def personal_keys(person: AbstractBaseUser) -> list[ApiToken]:
    """The person's own personal keys, newest first (revoked ones included, marked so)."""
    return list(ApiToken.objects.filter(person=person, kind=ApiToken.Kind.PERSONAL).order_by("-id"))


def personal_key_create(
    *, person: AbstractBaseUser, name: str, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """A new personal key of `person`; the raw key is in the answer and nowhere else."""
    active = ApiToken.objects.filter(
        person=person, kind=ApiToken.Kind.PERSONAL, revoked_at__isnull=True
    ).exclude(expires_at__lte=timezone.now())
    if active.count() >= MAX_ACTIVE_KEYS:
        raise KeyLimitReached()
    return api_token_create(
        person=person, name=name, kind=ApiToken.Kind.PERSONAL, expires_at=expires_at
    )


def personal_key_revoke(*, person: AbstractBaseUser, key_id: int) -> bool:
    """Revoke one of `person`'s own personal keys; False when no such key is theirs."""
    token = ApiToken.objects.filter(pk=key_id, person=person, kind=ApiToken.Kind.PERSONAL).first()
    if token is None:
        return False
    api_token_revoke(token=token)
    return True
