"""How large a request body may be, by path: the table the web server checks before it keeps
a byte of a body (hermes_site/webserver.py).

The table is settings.REQUEST_BODY_LIMITS (API v1, /v1) plus the prefixes apps register in
their ready() (an upload path needing more than the default); the longest prefix matching the
request's path wins, and a path no prefix matches gets settings.HTTP_MAX_BODY_BYTES. Nothing
here imports Twisted or daphne, so apps can register without importing the server.
"""

from urllib.parse import unquote, urlsplit

from django.conf import settings

_registered: dict[str, int] = {}


def body_limit_register(prefix: str, max_bytes: int) -> None:
    """Let bodies of requests whose path starts with `prefix` reach `max_bytes` (for an app's
    ready(); an entry of settings.REQUEST_BODY_LIMITS for the same prefix wins)."""
    if not prefix.startswith("/"):
        raise ValueError(f"a body limit's prefix is a path starting with '/', not {prefix!r}")
    if max_bytes < 0:
        raise ValueError(f"a body limit is a number of bytes, not {max_bytes!r}")
    _registered[prefix] = max_bytes


def body_limits() -> dict[str, int]:
    """Prefix → largest body in bytes, registered entries overridden by the settings' ones."""
    return {**_registered, **settings.REQUEST_BODY_LIMITS}


def body_limit_for(path: str) -> int:
    """The largest body in bytes a request to `path` may send."""
    best_prefix, limit = "", settings.HTTP_MAX_BODY_BYTES
    for prefix, max_bytes in body_limits().items():
        if len(prefix) > len(best_prefix) and path.startswith(prefix):
            best_prefix, limit = prefix, max_bytes
    return limit


def request_path(target: bytes) -> str:
    """The path a request line's target names, decoded as the application will see it
    (daphne unquotes it), so `/%61pi/v1/` is held to the limit of `/api/v1/`. Absolute-form
    targets (`http://host/path`) are reduced to their path; the query string is dropped."""
    text = target.decode("latin-1")
    if not text.startswith("/"):
        text = urlsplit(text).path or "/"
    return unquote(text.split("?", 1)[0])
