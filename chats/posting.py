"""Who may post in a chat: the port a channel adapter fills in, and the verdict's shape.

`chats.selectors.chat_may_post` is the one rule every door asks (the web composer, API v1,
`/v1`, the terminal, schedules and the agent's schedule tool). Part of the answer lives
outside the hub: a Telegram group's hub membership outlives leaving the group or a ban,
and only the Bot API knows. So a channel adapter registers a `PostCheck` for its channel
in `AppConfig.ready()` (the bridge does for `telegram`); `chats` never imports it, and the
apps that ask (schedules) never import the adapter.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class PostVerdict:
    """May this person post here now? `reason` says why not, in words the person can read;
    `unsure` when the channel could not answer just now (ask again later: a refusal that
    is no judgement on the person)."""

    allowed: bool
    reason: str = ""
    unsure: bool = False

    def __bool__(self) -> bool:
        return self.allowed


ALLOWED = PostVerdict(True)

# (person, chat) -> PostVerdict, asked only for a member of the chat whose hub-side right
# holds already; it answers what the channel itself says about them now.
PostCheck = Callable[[object, object], PostVerdict]

_checks: dict[str, PostCheck] = {}


def register_post_check(channel: str, check: PostCheck) -> None:
    """Add (or replace) the adapter's answer for chats of `channel`."""
    _checks[channel] = check


def post_check(channel: str) -> PostCheck | None:
    return _checks.get(channel)


def post_check_channels() -> list[str]:
    """The channels whose adapters answer for their chats."""
    return sorted(_checks)
