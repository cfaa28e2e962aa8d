"""Schedules the agent makes: created at once in the asker's own private chat, proposed in a
shared one, where a chat admin approves or rejects them.

Why: a schedule makes the agent speak first in a chat, again and again. In a group or room
anyone's message (or text pasted into one) could lead the model to set one up, so there it
waits, disabled, until a person who runs the chat says yes. "Private" is the rule memory
and skills use: a DM, terminal or API chat whose one member is the asker; every group,
forum topic and web room is shared, whatever its member count today.

Who decides (docs/SECURITY.md, "Schedules"): the chat's owners and admins (a forum topic's:
its group's), active, as stored when they decide. Nobody else, not the proposer unless
they are an admin themselves, not staff as such. A decision is taken once: a second one
(another admin, a second button press) finds it decided and changes nothing.

A pending schedule is `enabled=False` with `approval="pending"`: the dispatcher reads only
enabled schedules, and resume / run now refuse anything not approved
(`schedules.services`), so nothing of it runs before the decision.
"""

import logging
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from chats.keys import make_chat_key
from chats.models import Actor, Chat, ChatKind, ChatMember
from chats.selectors import chat_private_to
from schedules import signals
from schedules.models import Schedule
from schedules.services import owner_post_refusal, schedule_create, schedule_spec
from schedules.timing import next_fire_time

logger = logging.getLogger(__name__)

DECIDER_ROLES = (ChatMember.Role.OWNER, ChatMember.Role.ADMIN)
AWAITING_APPROVAL = "waiting for a chat admin's approval"
Approval = Schedule.Approval


class ApprovalNotAllowed(Exception):
    """The person may not decide this schedule (or there is no such pending proposal for
    them to see): callers answer "not found"."""


class ApprovalStale(Exception):
    """The proposal was decided already; the message says how and by whom."""


class ApprovalInvalid(Exception):
    """It cannot be approved any more (its owner lost access, its one time has passed)."""


def _roles_chat_keys(chat: Chat) -> set[str]:
    """The chats whose memberships hold `chat`'s roles: itself and, for a forum topic, its
    group (as `toolservers.roles` reads them)."""
    keys = {chat.chat_key}
    if chat.kind == ChatKind.TOPIC:
        keys.add(make_chat_key(chat.channel, chat.external_id, None))
    return keys


def decider_ids(chat: Chat) -> QuerySet:
    """The ids of the active people who decide proposals for `chat` (values queryset)."""
    return (
        ChatMember.objects.filter(
            chat__chat_key__in=_roles_chat_keys(chat),
            role__in=DECIDER_ROLES,
            person__is_active=True,
        )
        .values_list("person_id", flat=True)
        .distinct()
    )


def may_decide(person: AbstractBaseUser | None, schedule: Schedule) -> bool:
    """May `person`, as stored now, approve or reject `schedule`?"""
    if person is None or not getattr(person, "is_authenticated", False):
        return False
    return decider_ids(schedule.chat).filter(person_id=person.pk).exists()


def schedule_create_by_agent(*, owner: AbstractBaseUser, chat: Chat, **fields) -> Schedule:
    """Create a schedule the agent was asked for by `owner`: enabled at once in the owner's
    own private chat, else pending (disabled, waiting for a chat admin) and announced through
    `schedules.signals.proposal_created` after commit. The checks and messages of
    `schedule_create` apply (ScheduleSpecError, PermissionDenied)."""
    private = owner is not None and chat_private_to(chat, person=owner)
    with transaction.atomic():
        schedule = schedule_create(owner=owner, chat=chat, **fields)
        if private:
            return schedule
        # In the same transaction as its creation: no dispatcher ever sees it enabled.
        Schedule.objects.filter(pk=schedule.pk).update(
            enabled=False,
            approval=Approval.PENDING,
            paused_reason=AWAITING_APPROVAL,
            paused_at=schedule.created_at,
        )
        schedule.refresh_from_db()
        transaction.on_commit(lambda: _announce(schedule.pk))
    return schedule


def _announce(schedule_id: int) -> None:
    schedule = Schedule.objects.select_related("chat", "owner").filter(pk=schedule_id).first()
    if schedule is None or schedule.approval != Approval.PENDING:
        return
    try:
        signals.proposal_created.send(sender=Schedule, schedule=schedule)
    except Exception:  # noqa: BLE001 - a notification must never undo the proposal
        logger.exception("announcing schedule proposal %s failed", schedule_id)


def schedule_approval_decide(
    *,
    schedule_id: int,
    decision: str,
    person: AbstractBaseUser | None,
    now: datetime | None = None,
) -> Schedule:
    """Approve (enable from now on) or reject a pending schedule as `person`, a chat admin.

    Raises ApprovalNotAllowed for anyone else (whether or not it exists), ApprovalStale
    when it was decided already, ApprovalInvalid when it can no longer run (its owner cannot
    read the chat, its one time has passed: it is rejected, saying why)."""
    if decision not in ("approve", "reject"):
        raise ValueError("decision must be approve or reject")
    now = now or timezone.now()
    invalid = ""
    # Asked before any lock is taken (a Telegram group's answer is a network round trip);
    # every run asks again.
    pending = Schedule.objects.select_related("chat", "owner").filter(pk=schedule_id).first()
    owner_problem = owner_post_refusal(pending.owner, pending.chat) if pending else ""
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(of=("self",))
            .select_related("chat", "owner")
            .filter(pk=schedule_id)
            .first()
        )
        if schedule is None or not may_decide(person, schedule):
            raise ApprovalNotAllowed("No such schedule waiting for you.")
        if schedule.approval != Approval.PENDING:
            raise ApprovalStale(decided_text(schedule))
        fields = {"approval_by": person, "approval_at": now}
        if decision == "approve":
            problem = ""
            next_at = next_fire_time(schedule_spec(schedule), now)
            if owner_problem:
                problem = owner_problem
            elif next_at is None:
                problem = "its time passed while it waited"
            if problem:
                _update(
                    schedule,
                    approval=Approval.REJECTED,
                    paused_reason=f"not approved: {problem}",
                    **fields,
                )
                invalid = f"It cannot be approved: {problem}. It is rejected."
            else:
                _update(
                    schedule,
                    approval=Approval.APPROVED,
                    enabled=True,
                    paused_reason="",
                    paused_at=None,
                    consecutive_failures=0,
                    next_fire_at=next_at,
                    **fields,
                )
        else:
            reason = f"rejected by {person.get_username()}"
            _update(schedule, approval=Approval.REJECTED, paused_reason=reason, **fields)
    if invalid:  # raised after commit: the rejection it records stays
        raise ApprovalInvalid(invalid)
    schedule.refresh_from_db()
    return schedule


def _update(schedule: Schedule, **fields) -> None:
    # Conditional on still pending: with the row lock this is belt and braces on PostgreSQL;
    # on SQLite the transaction's write lock already serialises deciders.
    Schedule.objects.filter(pk=schedule.pk, approval=Approval.PENDING).update(**fields)


def decided_text(schedule: Schedule) -> str:
    """ "Already approved by ada" (or rejected), for a decision that came too late."""
    verb = "approved" if schedule.approval == Approval.APPROVED else "rejected"
    by = schedule.approval_by.get_username() if schedule.approval_by_id else "someone"
    return f"Already {verb} by {by}"


# --- reads --------------------------------------------------------------------------------


def schedules_pending_for(person: AbstractBaseUser | None) -> QuerySet[Schedule]:
    """Pending schedules `person` may decide, oldest first (none for anyone else): those of
    chats where they are an owner or admin, and of forum topics whose group they are an
    owner or admin of. One query."""
    if person is None or not getattr(person, "is_authenticated", False) or not person.is_active:
        return Schedule.objects.none()
    admin_of = ChatMember.objects.filter(
        person_id=person.pk, person__is_active=True, role__in=DECIDER_ROLES
    )
    of_group = admin_of.filter(
        chat__kind=ChatKind.GROUP,
        chat__channel=OuterRef("chat__channel"),
        chat__external_id=OuterRef("chat__external_id"),
    )
    return (
        Schedule.objects.filter(approval=Approval.PENDING)
        .filter(
            Exists(admin_of.filter(chat_id=OuterRef("chat_id")))
            | (Q(chat__kind=ChatKind.TOPIC) & Exists(of_group))
        )
        .select_related("chat", "owner")
        .order_by("created_at", "id")
    )


def schedule_pending_count(person) -> int:
    """How many schedules wait for `person`'s decision (the Approvals badge)."""
    return schedules_pending_for(person).count()


def schedule_review_recipients(*, schedule: Schedule, channel: str) -> list[Actor]:
    """Actors on `channel` of the people who decide `schedule` (for Telegram buttons)."""
    return list(
        Actor.objects.filter(channel=channel, person_id__in=decider_ids(schedule.chat)).order_by(
            "id"
        )
    )
