"""Who may do what with a schedule (docs/SECURITY.md, "Schedules").

The owner of a schedule is a person who may post in its target chat
(`chats.selectors.chat_may_post`, the rule of every door), when it is created, enabled, run
now, its prompt changed, and whenever a run starts (a schedule whose owner lost the right is
paused, the run skipped and the owner told why); only the owner, the chat's owners and
admins, and staff may change, pause, resume, run or delete it; a schedule the agent proposed
in a shared chat runs only once a chat admin approved it.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied

from chats.models import Chat, ChatMember
from chats.selectors import (
    chat_may_post,
    chat_still_readable,
)
from schedules.models import Schedule

OWNER_LOST_ACCESS = "its owner can no longer read this chat"
OWNER_MAY_NOT_POST = "its owner may not post in this chat: "


def owner_post_refusal(person: AbstractBaseUser | None, chat: Chat) -> str:
    """Why `person` (as stored now) may not have a schedule post in `chat`, or "" when they
    may: the rule of every door that posts (`chat_may_post`), in a schedule's words."""
    verdict = chat_may_post(person, chat)
    if verdict:
        return ""
    if person is None or not chat_still_readable(person.pk, chat.pk):
        return OWNER_LOST_ACCESS
    return OWNER_MAY_NOT_POST + verdict.reason


def _refuse_unless_owner_may_post(schedule: Schedule) -> None:
    problem = owner_post_refusal(schedule.owner, schedule.chat)
    if problem == OWNER_LOST_ACCESS:
        raise PermissionDenied("The schedule's owner can no longer read its chat.")
    if problem:
        reason = problem.removeprefix(OWNER_MAY_NOT_POST)
        raise PermissionDenied(f"The schedule's owner may not post in its chat: {reason}.")


def _may_manage(person: AbstractBaseUser | None, schedule: Schedule) -> bool:
    if person is None:
        return True  # an operator at the command line
    if not person.is_active:
        return False
    if person.pk == schedule.owner_id or person.is_staff:
        return True
    role = (
        ChatMember.objects.filter(chat_id=schedule.chat_id, person=person)
        .values_list("role", flat=True)
        .first()
    )
    return role in (ChatMember.Role.OWNER, ChatMember.Role.ADMIN)


def may_manage(person: AbstractBaseUser | None, schedule: Schedule) -> bool:
    """Whether `person` may change, pause, resume, run or delete `schedule`: its owner, the
    chat's owners and admins, staff (an active person). Pages and `/schedules` use it to
    show or refuse an action; every service below checks it again."""
    return person is not None and _may_manage(person, schedule)


def manageable_ids(person: AbstractBaseUser, schedules: list[Schedule]) -> set[int]:
    """The ids of `schedules` that `person` may manage (the rule of `_may_manage`), in one
    query for the person's roles, so a page of schedules costs the same whatever its size."""
    if person is None or not person.is_active:
        return set()
    if person.is_staff:
        return {s.pk for s in schedules}
    deciding = set(
        ChatMember.objects.filter(
            person=person,
            chat_id__in={s.chat_id for s in schedules},
            role__in=(ChatMember.Role.OWNER, ChatMember.Role.ADMIN),
        ).values_list("chat_id", flat=True)
    )
    return {s.pk for s in schedules if s.owner_id == person.pk or s.chat_id in deciding}


def _check_approved(schedule: Schedule) -> None:
    """A schedule the agent proposed in a shared chat runs only once a chat admin approved
    it (schedules.proposals): neither resume nor run now goes around that."""
    if schedule.approval == Schedule.Approval.PENDING:
        raise PermissionDenied("This schedule is waiting for a chat admin's approval.")
    if schedule.approval == Schedule.Approval.REJECTED:
        raise PermissionDenied("A chat admin rejected this schedule; it does not run.")
