"""What staff are told about tool servers: a server whose tools changed after its first
listing (new tools, or a changed description, schema or annotations), which ask a decider
until staff accept them.

Told are the people who may accept them (`toolservers.policy.may_manage_servers`: staff for
an HTTP server, superusers for a stdio one), through `chats.deliveries.person_tell`, the way
budget warnings reach staff: in their own private chat with the bot when they linked one,
else on their dashboard. The text names tools by a cleaned name only, never a description:
what a server announces is untrusted.
"""

import re

from django.contrib.auth import get_user_model
from django.db.models import Q

from chats.deliveries import person_tell
from toolservers.models import Transport

NOTICE_KIND = "tool_changed"
NAMED = 10  # tools a notice names; more are counted


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]


def tool_managers(transport: str) -> list:
    """The active people who may manage (and accept the tools of) a server of `transport`."""
    who = Q(is_superuser=True)
    if transport != Transport.STDIO:
        who |= Q(is_staff=True)
    return list(get_user_model().objects.filter(who, is_active=True).order_by("pk"))


def staff_tell_tools_changed(*, server, changes: list[tuple[str, str]]) -> int:
    """Tell the staff who manage `server` that these tools ((name, what changed)) wait for
    their acceptance; in the caller's transaction. Returns how many people were told."""
    named = [f"{_clean(name)} ({note})" for name, note in changes[:NAMED]]
    more = len(changes) - len(named)
    listed = "; ".join(named) + (f"; and {more} more" if more > 0 else "")
    text = (
        f"The tool server {server.slug} changed its tools: {listed}. Until staff accept them "
        "on the Tools page (/tools/), every call of them asks a decider, in every chat "
        "(a policy a chat or staff set by hand still applies)."
    )
    people = tool_managers(server.transport)
    for person in people:
        person_tell(person=person, text=text, kind=NOTICE_KIND)
    return len(people)
