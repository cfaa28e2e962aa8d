"""The schedules section of the Approvals page and badge: schedules the agent proposed in
shared chats, shown only to the people who decide them (the chats' owners and admins;
`schedules.proposals.schedules_pending_for` returns nothing for anyone else). Each item has
a box for the page's bulk decisions; every decision goes through
`schedules.proposals.schedule_approval_decide`, which checks the decider again."""

from dataclasses import dataclass

from django.utils import timezone

from chats.approvals import ApprovalSection, BulkInvalid, BulkOutcome
from schedules.models import Schedule
from schedules.proposals import (
    ApprovalInvalid,
    ApprovalNotAllowed,
    ApprovalStale,
    schedule_approval_decide,
    schedule_pending_count,
    schedules_pending_for,
)
from schedules.selectors import schedule_description
from schedules.services import schedule_spec
from schedules.timing import next_fire_time, zone

SHOWN_LIMIT = 50  # proposals shown (and decided in bulk) at once, oldest first
MAX_ID = 2**31 - 1  # PostgreSQL's integer column refuses a larger number


@dataclass
class ScheduleItem:
    schedule: Schedule
    description: str
    first_run: str  # when it would run first if approved now, in its own time zone


def _item(schedule: Schedule) -> ScheduleItem:
    # A pending schedule is disabled: when it would first run is computed from its timing.
    first_at = next_fire_time(schedule_spec(schedule), timezone.now())
    first = ""
    if first_at is not None:
        first = first_at.astimezone(zone(schedule.timezone)).strftime("%Y-%m-%d %H:%M %Z")
    return ScheduleItem(schedule, schedule_description(schedule), first)


def section_context(person) -> dict:
    """The oldest SHOWN_LIMIT schedules waiting for `person` and how many wait in all."""
    pending = schedules_pending_for(person)
    shown = list(pending[:SHOWN_LIMIT])
    total = len(shown) if len(shown) < SHOWN_LIMIT else pending.count()
    return {
        "schedule_proposals": [_item(schedule) for schedule in shown],
        "schedule_proposals_total": total,
    }


def bulk_parse(values: list[str]) -> list[int]:
    """The ticked schedules' ids, deduplicated, in order; at most SHOWN_LIMIT."""
    picked: dict[int, None] = {}
    for raw in values:
        if not str(raw).isdecimal() or not 0 < int(raw) <= MAX_ID:
            raise BulkInvalid("Unknown schedule.")
        picked.setdefault(int(raw), None)
    if len(picked) > SHOWN_LIMIT:
        raise BulkInvalid(f"Select at most {SHOWN_LIMIT} schedules at once.")
    return list(picked)


def bulk_decide(person, decision: str, picked: list[int]) -> BulkOutcome:
    """Decide each picked schedule as `person`; what could not be decided is reported."""
    outcome = BulkOutcome()
    for schedule_id in picked:
        try:
            schedule_approval_decide(schedule_id=schedule_id, decision=decision, person=person)
        except ApprovalNotAllowed:
            outcome.failures.append(f"schedule #{schedule_id}: not found.")
        except (ApprovalStale, ApprovalInvalid) as exc:
            outcome.failures.append(f"schedule #{schedule_id}: {exc}")
        else:
            outcome.done += 1
    return outcome


approval_section = ApprovalSection(
    name="schedules",
    count=schedule_pending_count,
    template="schedules/approvals.html#section",
    context=section_context,
    order=30,
    bulk_field="schedule",
    bulk_parse=bulk_parse,
    bulk_decide=bulk_decide,
)
