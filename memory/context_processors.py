"""The approvals badge in the navigation."""

from functools import cache

from chats.approvals import approvals_pending_count


def memory_badge(request) -> dict:
    """`approvals_pending_count`: the decisions waiting for a logged-in person in every
    section of the Approvals page (memory proposals, skill changes), one count per section,
    run only if a template shows it (a callable, cached for the request's render)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    @cache
    def count() -> int:
        return approvals_pending_count(user)

    return {"approvals_pending_count": count}
