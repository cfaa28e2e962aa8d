"""`api_endpoint`: what every API view shares, in one place.

No CSRF (callers authenticate with a bearer token, not a cookie), the allowed methods (405
with `Allow`), authentication (401), the per-token rate limit (429), and the JSON error
shape for every failure, including unexpected ones (500), so a client never sees HTML or a
redirect to the login page.
"""

import logging
from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from chats.api.auth import authenticate
from chats.api.errors import ApiError, error_response, invalid_field
from chats.api.ratelimit import rate_limit_check
from chats.services import IngestError

logger = logging.getLogger(__name__)


def api_endpoint(*methods: str) -> Callable:
    """Wrap `view(request, person, **kwargs)`; `person` is the active owner of a valid token."""
    allow = ", ".join(methods)

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            try:
                if request.method not in methods:
                    raise ApiError(
                        405,
                        "method_not_allowed",
                        f"Method {request.method} is not allowed here; use {allow}.",
                        headers={"Allow": allow},
                    )
                token = authenticate(request)
                rate_limit_check(token)
                return view(request, token.person, *args, **kwargs)
            except ApiError as error:
                return error_response(error)
            except IngestError as error:
                return error_response(invalid_field(error.field, str(error)))
            except Exception:
                logger.exception("API request %s %s failed", request.method, request.path)
                return error_response(
                    ApiError(500, "server_error", "The server failed to answer; it was logged.")
                )

        return csrf_exempt(wrapper)

    return decorate
