"""What the chat a memory proposal was made in hears when it expires (memory's rule for when:
`memory.services.memory_expire_proposals`, run hourly by beat and before every decision).

Every reader of that chat sees the notice, and a proposal is often about one person (Bob's
preferences, proposed in a group): so the notice says how many proposals made there expired
and nothing of what they said or whom they were about. The proposer's side already knows
what it proposed; the entry's trail keeps the text for its reviewers.
"""

from django.conf import settings

from chats.models import Chat
from chats.notices import chat_notice_post

NOTICE_KIND = "memory-expiry"


def notice_text(count: int) -> str:
    """The notice for `count` proposals made in one chat, without their text or subject."""
    head = "A memory proposal" if count == 1 else f"{count} memory proposals"
    ttl = f"{settings.MEMORY_PROPOSAL_TTL_DAYS:g}"
    return (
        f"{head} made in this chat expired without a decision (a proposal waits {ttl} days); "
        "nothing was changed."
    )


def expired_tell_chats(entries_by_chat: dict[int, list[int]]) -> None:
    """Post one notice in each chat of `entries_by_chat` (chat id → expired entry ids)."""
    for chat in Chat.objects.filter(pk__in=entries_by_chat):
        entry_ids = entries_by_chat[chat.pk]
        chat_notice_post(
            chat=chat,
            text=notice_text(len(entry_ids)),
            kind=NOTICE_KIND,
            detail={"entries": entry_ids},
        )
