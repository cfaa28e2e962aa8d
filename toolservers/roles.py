"""Who holds the admin role of a group chat, and where it came from (writes and reads).

A Telegram group has no owner: its deciders (`toolservers.policy.may_decide`) are staff and
its admins. A member becomes an admin in two ways, each recorded in `ChatRoleSource`:

- **from Telegram**: the group's administrators, read from the Bot API by the bridge
  (`bots.group_admins`), who are linked people. `telegram_admins_apply` makes them admins
  and makes plain members again those it made admins before and Telegram no longer lists.
  Only the Bot API's answer counts: nothing in an update (a name, a forwarded message, a
  `chat_member` notice) gives a role.
- **by staff, by hand** (`member_role_set`): an admin or a plain member staff named stays
  so whatever Telegram says, until staff change it again.

Owners and roles set before this existed (no source row) are never changed by a refresh.
The roles of a forum topic are those of its group (`toolservers.policy.group_chat_key`).
"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from chats.models import Actor, Channel, Chat, ChatKind, ChatMember
from chats.services import chat_get_or_create
from toolservers.models import ChatRoleSource, GroupRolesRefresh, ToolAudit
from toolservers.policy import group_chat_key

Source = ChatRoleSource.Source
SETTABLE_ROLES = (ChatMember.Role.ADMIN, ChatMember.Role.MEMBER)


def roles_chat(chat: Chat) -> Chat:
    """The chat whose memberships hold `chat`'s roles: a forum topic's group (created, empty,
    when nobody wrote outside the topics yet), else `chat` itself."""
    if chat.kind != ChatKind.TOPIC:
        return chat
    group = Chat.objects.filter(chat_key=group_chat_key(chat)).first()
    if group is None:
        group, _ = chat_get_or_create(
            channel=chat.channel, chat_id=chat.external_id, kind=ChatKind.GROUP
        )
    return group


@dataclass(frozen=True)
class RolesChange:
    promoted: list[int]  # person ids made admins
    demoted: list[int]  # person ids made plain members again


def telegram_admins_apply(*, chat: Chat, admin_user_ids: Iterable[int | str]) -> RolesChange:
    """Make the linked, active people among the group's Telegram administrators admins of
    `chat` (the group's chat), and make plain members again those a previous reading made
    admins and Telegram no longer lists; owners and roles staff set are kept. Records the
    reading as the group's last known roles."""
    ids = {str(user_id) for user_id in admin_user_ids}
    admins = set(
        Actor.objects.filter(
            channel=Channel.TELEGRAM,
            namespace="",
            external_id__in=ids,
            person__isnull=False,
            person__is_active=True,
        ).values_list("person_id", flat=True)
    )
    now = timezone.now()
    promoted, demoted = [], []
    with transaction.atomic():
        members = {m.person_id: m for m in ChatMember.objects.select_for_update().filter(chat=chat)}
        sources = {s.person_id: s for s in ChatRoleSource.objects.filter(chat=chat)}
        for person_id in sorted(admins):
            source = sources.get(person_id)
            if source is not None and source.source == Source.STAFF:
                continue  # staff's choice wins
            member = members.get(person_id)
            if member is None:
                ChatMember.objects.create(
                    chat=chat, person_id=person_id, role=ChatMember.Role.ADMIN
                )
            elif member.role == ChatMember.Role.MEMBER:
                ChatMember.objects.filter(pk=member.pk).update(role=ChatMember.Role.ADMIN)
            else:
                continue  # an owner, or an admin for another reason: not ours to record
            ChatRoleSource.objects.update_or_create(
                chat=chat,
                person_id=person_id,
                defaults={"source": Source.TELEGRAM, "set_by": None, "updated_at": now},
            )
            promoted.append(person_id)
        for person_id, source in sources.items():
            if source.source != Source.TELEGRAM or person_id in admins:
                continue
            member = members.get(person_id)
            if member is not None and member.role == ChatMember.Role.ADMIN:
                ChatMember.objects.filter(pk=member.pk).update(role=ChatMember.Role.MEMBER)
                demoted.append(person_id)
            source.delete()
        GroupRolesRefresh.objects.update_or_create(
            chat=chat, defaults={"refreshed_at": now, "tried_at": now, "error": ""}
        )
        if promoted or demoted:
            ToolAudit.objects.create(
                action="roles.telegram",
                via=Channel.TELEGRAM,
                chat=chat,
                detail={"promoted": promoted, "demoted": demoted},
            )
    return RolesChange(promoted=promoted, demoted=demoted)


def group_roles_failure(*, chat: Chat, error: str) -> GroupRolesRefresh:
    """Remember that reading the group's administrators failed; the roles stay as they are."""
    state, _ = GroupRolesRefresh.objects.update_or_create(
        chat=chat, defaults={"tried_at": timezone.now(), "error": error[:500] or "failed"}
    )
    return state


def group_roles_state(chat: Chat) -> GroupRolesRefresh | None:
    """The last reading of the administrators of `chat`'s group (None: never read)."""
    return GroupRolesRefresh.objects.filter(chat__chat_key=group_chat_key(chat)).first()


def _staff(person) -> bool:
    return bool(person and person.is_active and (person.is_staff or person.is_superuser))


def member_role_set(*, by, chat: Chat, person_id: int, role: str, via: str = "dashboard"):
    """Staff name a member of `chat` (or of its group) an admin of the group's chat, or make
    them a plain member again; the choice is kept by every later reading from Telegram.
    Owners stay owners; someone who is not a member is refused."""
    if via != "command" and not _staff(by):
        raise PermissionDenied("only staff name a chat's admins")
    if role not in SETTABLE_ROLES:
        raise ValidationError("a role set by hand is admin or member")
    if not chat.is_shared:
        raise ValidationError("a private chat has no admins to name")
    target = roles_chat(chat)
    person = get_user_model().objects.filter(pk=person_id, is_active=True).first()
    in_chat = ChatMember.objects.filter(chat__in={chat.pk, target.pk}, person_id=person_id)
    if person is None or not in_chat.exists():
        raise ValidationError("only a member of this chat can be named its admin")
    with transaction.atomic():
        member, _ = ChatMember.objects.select_for_update().get_or_create(
            chat=target, person=person, defaults={"role": role}
        )
        if member.role == ChatMember.Role.OWNER:
            raise ValidationError("an owner stays an owner")
        if member.role != role:
            ChatMember.objects.filter(pk=member.pk).update(role=role)
            member.role = role
        ChatRoleSource.objects.update_or_create(
            chat=target,
            person=person,
            defaults={"source": Source.STAFF, "set_by": by, "updated_at": timezone.now()},
        )
        ToolAudit.objects.create(
            action="role.set",
            person=by,
            via=via,
            chat=target,
            detail={"person": person.pk, "username": person.get_username(), "role": role},
        )
    return member


@dataclass(frozen=True)
class MemberRole:
    """A member of a chat's group as its tools page shows them: role and where it came from."""

    person_id: int
    name: str
    role: str
    source: str  # telegram, staff, or "" (an owner, or set before sources were recorded)


def chat_roles(chat: Chat) -> list[MemberRole]:
    """The members of `chat` and of its group (for a topic), with the role that counts for
    deciding (the group's) and its source; owners and admins first. Callers check readers."""
    key = group_chat_key(chat)
    rows = ChatMember.objects.filter(chat__chat_key__in={chat.chat_key, key}).select_related(
        "person", "chat"
    )
    sources = {s.person_id: s.source for s in ChatRoleSource.objects.filter(chat__chat_key=key)}
    rank = {ChatMember.Role.OWNER: 0, ChatMember.Role.ADMIN: 1, ChatMember.Role.MEMBER: 2}
    best: dict[int, ChatMember] = {}
    for row in rows:
        seen = best.get(row.person_id)
        if seen is None or rank.get(row.role, 3) < rank.get(seen.role, 3):
            best[row.person_id] = row
    shown = [
        MemberRole(
            person_id=row.person_id,
            name=row.person.get_full_name() or row.person.get_username(),
            role=row.role,
            source=sources.get(row.person_id, "") if row.chat.chat_key == key else "",
        )
        for row in best.values()
        if row.person.is_active
    ]
    return sorted(shown, key=lambda m: (rank.get(m.role, 3), m.name.lower()))
