"""Shared pieces of the skills admin (`skills/admin.py`, `skills/admin_proposals.py`):
short text, links, who/where labels, per-item action reports, the reviewer gate."""

import json

from django.contrib import messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from chats.admin import admin_link
from hermes_site.scanning import reveal_hidden
from skills import policy
from skills.models import SkillProposal, Via

SHORT_TEXT = 80
HEAD_CHARS = 200  # what a list reads of an audit row's before/after
MAX_LISTED = 20  # skills or failures named in one action report
ROWS_SHOWN = 200  # versions and events on a skill's page; the rest via the filtered lists
PENDING = SkillProposal.Status.PENDING


def _short(text: str) -> str:
    """One line of at most SHORT_TEXT characters, hidden code points shown as markers."""
    return Truncator(" ".join(reveal_hidden(text or "").split())).chars(SHORT_TEXT)


def _pretty(value) -> str:
    """JSON for people: indented, non-ASCII kept, hidden code points shown as markers."""
    return reveal_hidden(json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True))


def _changelist(model, **filters) -> str:
    url = reverse(f"admin:skills_{model._meta.model_name}_changelist")
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return f"{url}?{query}" if query else url


def _who(person, actor, via: str = "") -> str:
    parts = []
    if person is not None:
        parts.append(admin_link(person, person.get_username()))
    if actor is not None:
        parts.append(format_html("{} ({})", reveal_hidden(actor.display_name), actor.channel))
    if not parts:
        return "the system" if via == Via.SYSTEM else "—"
    return format_html_join(" / ", "{}", ((part,) for part in parts))


def _source(chat, turn) -> str:
    parts = [
        admin_link(chat) if chat is not None else "",
        admin_link(turn) if turn is not None else "",
    ]
    if not any(parts):
        return "—"
    return format_html_join(" · ", "{}", ((part,) for part in parts if part))


def _proposal_link(proposal_id: int | None) -> str:
    if proposal_id is None:
        return "—"
    url = reverse("admin:skills_skillproposal_change", args=[proposal_id])
    return format_html('<a href="{}">#{}</a>', url, proposal_id)


def _version_label(number) -> str:
    return "—" if number is None else f"v{number}"


def _files(files: dict) -> list[dict]:
    return [
        {"path": file_path, "text": text, "size": len(text.encode())}
        for file_path, text in sorted((files or {}).items())
    ]


def _names(slugs: list[str]) -> str:
    more = len(slugs) - MAX_LISTED
    return ", ".join(slugs[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")


def _report(model_admin, request, lines: list[tuple[str, int]], failures: list[str]) -> None:
    """The summary lines, then one warning per row that could not be changed (at most
    MAX_LISTED, then how many more)."""
    for line, level in lines:
        model_admin.message_user(request, line, level)
    for failure in failures[:MAX_LISTED]:
        model_admin.message_user(request, failure, messages.WARNING)
    if len(failures) > MAX_LISTED:
        more = len(failures) - MAX_LISTED
        model_admin.message_user(request, f"… and {more} more not changed.", messages.WARNING)


class ReviewerActions:
    """Actions and forms are for skill reviewers; the services check again on every call."""

    def has_review_permission(self, request) -> bool:
        return policy.may_review(request.user)
