"""Who may configure tool servers and who decides a chat's toolset.

- Staff add and edit servers; a stdio server runs a process on the hub's machine, so only
  superusers add or edit one.
- A chat's deciders turn servers and tools on or off in it: the person alone in their own
  private chat (a DM, terminal or API conversation whose only member they are), the owners
  and admins of a shared chat, and staff. Other members only see what is on.
- A Telegram group's admins are its Telegram administrators who are linked people (read
  from the Bot API, `bots.group_admins`) and the members staff named admins by hand
  (`toolservers.roles`). A forum topic shares its group's deciders: the roles are held by
  the group's own chat (`roles_chat`), and a topic's deciders are those of its group too.
"""

from chats.keys import make_chat_key
from chats.models import Chat, ChatKind, ChatMember
from chats.selectors import chat_private_to

DECIDER_ROLES = (ChatMember.Role.OWNER, ChatMember.Role.ADMIN)


def _active(person) -> bool:
    return person is not None and getattr(person, "is_active", False)


def may_manage_servers(person, *, transport: str = "http") -> bool:
    """Staff manage HTTP servers; a stdio server (a local process) needs a superuser."""
    if not _active(person):
        return False
    if transport == "stdio":
        return person.is_superuser
    return person.is_staff or person.is_superuser


def group_chat_key(chat: Chat) -> str:
    """The key of the chat that holds the roles of `chat`: a forum topic's group, else itself."""
    if chat.kind != ChatKind.TOPIC:
        return chat.chat_key
    return make_chat_key(chat.channel, chat.external_id, None)


def may_decide(chat: Chat, person) -> bool:
    """May `person` turn tool servers or tools on or off in `chat`? In a forum topic the
    owners and admins of its group decide too."""
    if not _active(person):
        return False
    if person.is_staff or person.is_superuser:
        return True
    if chat_private_to(chat, person=person):
        return True
    roles = ChatMember.objects.filter(person=person, role__in=DECIDER_ROLES)
    if chat.kind == ChatKind.TOPIC:
        return roles.filter(chat__chat_key__in=[chat.chat_key, group_chat_key(chat)]).exists()
    return roles.filter(chat=chat).exists()


def may_read(chat: Chat, person) -> bool:
    """May `person` see `chat`'s toolset and the audit of its calls (members and staff)?"""
    if not _active(person):
        return False
    if person.is_staff or person.is_superuser:
        return True
    return ChatMember.objects.filter(chat=chat, person=person).exists()
