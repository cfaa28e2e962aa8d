"""What a decider reads of a waiting call's arguments: a bounded preview for every card, and
the whole call on the full view.

A card (dashboard, terminal, Telegram) has room for a few thousand characters; a call's
arguments may hold far more. So that a long value can never push a short one out of view,
the preview lists every value by its path (`"options"."command"`, `"steps"[1]`), nested
objects and arrays opened down to values short enough to read whole, shortest first (ties
by path): each value gets at most an equal share of the room the shorter ones left, so
short values show whole and the long ones share the rest, each cut one saying how long it
is. Only when the paths alone overflow the card are the longest values left out, and the
card says how many. Values are JSON, so a value can never look like another line.

Every card says plainly how much it shows ("Showing 2,950 of 48,210 characters — see all")
and links to the full view (`approval_arguments` in toolservers/approval_views.py), which
shows every argument whole. Hidden code points (bidi overrides, zero-width and other format
characters) are shown as the scanner's markers (`reveal_hidden`) on every card and the full
view, so what a decider reads is what the tool receives.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.urls import reverse

from hermes_site.scanning import reveal_hidden

ARGUMENTS_SHOWN_CHARS = 3000
SPLIT_OVER = 80  # an object or array longer than this (as JSON) is shown value by value
KEY_CHARS = 60  # one key of a path, cut beyond this
MIN_VALUE_CHARS = 24  # a value is never cut to less than this
LOOPBACK = {"localhost", "127.0.0.1", "::1"}


@dataclass(frozen=True)
class Preview:
    """The lines a card shows and how much of the arguments they hold."""

    text: str
    total_chars: int  # every value, as JSON with hidden characters marked
    shown_chars: int
    values_total: int
    values_shown: int
    values_cut: int

    @property
    def cut(self) -> bool:
        return self.values_cut > 0 or self.values_shown < self.values_total

    @property
    def note(self) -> str:
        """The cut said plainly ("" when everything shows)."""
        if not self.cut:
            return ""
        parts = [f"Showing {self.shown_chars:,} of {self.total_chars:,} characters"]
        if self.values_shown < self.values_total:
            parts.append(f"{self.values_shown:,} of {self.values_total:,} values")
        return ", ".join(parts)


def _dump(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _key(key: str) -> str:
    key = str(key)
    if len(key) > KEY_CHARS:
        key = key[: KEY_CHARS - 1] + "…"
    return reveal_hidden(_dump(key))


def _leaves(value, path: str) -> list[tuple[str, str]]:
    """(path, value as JSON) for `value`, opened while it is a long object or array."""
    text = _dump(value)
    if isinstance(value, dict) and value and (len(text) > SPLIT_OVER or not path):
        out = []
        for key in sorted(value, key=str):
            label = _key(key)
            out += _leaves(value[key], f"{path}.{label}" if path else label)
        return out
    if isinstance(value, list) and value and len(text) > SPLIT_OVER:
        out = []
        for index, item in enumerate(value):
            out += _leaves(item, f"{path}[{index}]")
        return out
    return [(path, reveal_hidden(text))]


def _cut(text: str, room: int, size: Callable[[str], int]) -> str:
    """The start of `text` within `room`, never ending inside a hidden-character marker."""
    out, used = [], 0
    for char in text:
        used += size(char)
        if used > room:
            break
        out.append(char)
    shown = "".join(out)
    start = shown.rfind("⟦")
    if start > shown.rfind("⟧"):
        shown = shown[:start]
    return shown


def arguments_preview(
    arguments, *, budget: int = ARGUMENTS_SHOWN_CHARS, size: Callable[[str], int] = len
) -> Preview:
    """Every value of `arguments` by its path within `budget` (measured by `size`), shortest
    first, so that no value, however long, hides a shorter one."""
    leaves = _leaves(arguments, "")
    entries = sorted((size(text), path, text) for path, text in leaves)
    total = sum(length for length, _, _ in entries)
    lines: list[str] = []
    remaining, shown, cut = budget, 0, 0
    for index, (length, path, text) in enumerate(entries):
        head = f"{path}: " if path else ""
        overhead = size(head) + 1  # the newline
        share = max(remaining // (len(entries) - index) - overhead, MIN_VALUE_CHARS)
        if length <= share:
            if overhead + length > remaining:
                break  # the paths left overflow the card: said on it
            value = text
        else:
            mark = f"… [{length:,} characters]"
            room = max(share - size(mark), MIN_VALUE_CHARS)
            if overhead + room + size(mark) > remaining:
                break
            value = _cut(text, room, size) + mark
            cut += 1
            length = size(value) - size(mark)
        lines.append(head + value)
        remaining -= overhead + size(value)
        shown += length
    return Preview(
        text="\n".join(lines),
        total_chars=total,
        shown_chars=shown,
        values_total=len(entries),
        values_shown=len(lines),
        values_cut=cut,
    )


def arguments_full(arguments) -> str:
    """The whole call, indented JSON, hidden characters marked: what the full view shows."""
    return reveal_hidden(json.dumps(arguments, ensure_ascii=False, indent=2, sort_keys=True))


def full_view_path(approval) -> str:
    """The dashboard address of the full view of `approval`'s arguments."""
    return reverse(
        "approval_arguments",
        kwargs={"chat_key": approval.chat.chat_key, "approval_id": approval.pk},
    )


def dashboard_base() -> str:
    """Where people reach the dashboard: DASHBOARD_URL, else the origin of the Telegram
    webhook (the hub's public address), else this machine's own port."""
    if settings.DASHBOARD_URL:
        return settings.DASHBOARD_URL.rstrip("/")
    webhook = urlsplit(settings.TELEGRAM_WEBHOOK_URL or "")
    if webhook.scheme in ("http", "https") and webhook.netloc:
        return f"{webhook.scheme}://{webhook.netloc}"
    return f"http://127.0.0.1:{settings.PORT}"


def full_view_url(approval) -> str:
    """The absolute address of the full view, for cards that leave the browser."""
    return dashboard_base() + full_view_path(approval)


def is_public(url: str) -> bool:
    """Does `url` name a host other people's devices can reach (not loopback)?"""
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and (parts.hostname or "") not in LOOPBACK
