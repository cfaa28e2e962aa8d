"""The approvals badge in the navigation."""

from functools import cache

from memory.selectors import memory_pending_count


def memory_badge(request) -> dict:
    """`memory_pending_count` for logged-in people: one COUNT query, run only if a template
    shows it (a callable, cached for the request's render)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    @cache
    def count() -> int:
        return memory_pending_count(user)

    return {"memory_pending_count": count}
