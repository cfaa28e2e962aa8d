"""Who is calling `/v1`: the person of an active personal key, or an OpenAIError.

The token rules are API v1's (`chats.api.auth`: hashed lookup, revocation, expiry, last use
with its address, the per-token rate limit); only the kind differs: an integration token is
refused here (403), an unknown, revoked or expired key is a 401, both in OpenAI's shape.
"""

from django.http import HttpRequest

from chats.api.auth import authenticate
from chats.api.errors import ApiError
from chats.api.ratelimit import rate_limit_check
from chats.models import ApiToken
from openai_api.errors import OpenAIError


def personal_key_person(request: HttpRequest):
    """The active person whose personal key the request carries (counted by the rate limit)."""
    try:
        token = authenticate(request, kind=ApiToken.Kind.PERSONAL)
        rate_limit_check(token)
    except ApiError as error:
        raise OpenAIError.from_api_error(error) from None
    return token.person
