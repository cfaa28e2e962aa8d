"""Writes to schedules: create, change, pause, resume, run now, delete; starting a run in
its chat and recording its outcome. Status changes happen here, under row locks or as
conditional updates. The dispatcher (`schedules.dispatch`) claims slots and calls
`schedule_run_start`.

Who may do what (docs/SECURITY.md, "Schedules"): the owner of a schedule is a person who
may post in its target chat (`chats.selectors.chat_may_post`, the rule of every door),
when it is created, enabled, run now, its prompt changed, and whenever a run starts (a
schedule whose owner lost the right is paused, the run skipped and the owner told why);
only the owner, the chat's owners and admins, and staff may change, pause, resume, run or
delete it, and only the owner changes its prompt (it is posted in their name).

Callers import from here; the code lives in three modules:

- `rights`: who may manage a schedule, and whether its owner may post in its chat;
- `changes`: create, update, pause, resume, delete, run now; a person's time zone;
- `runs`: starting due runs and recording their outcome.
"""

from schedules.services.changes import (
    MAX_PROMPT_CHARS,
    TIMING_FIELDS,
    UNSET,
    person_timezone_set,
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
    schedule_spec,
    schedule_update,
    validate_spec,
)
from schedules.services.rights import (
    OWNER_LOST_ACCESS,
    OWNER_MAY_NOT_POST,
    manageable_ids,
    may_manage,
    owner_post_refusal,
)
from schedules.services.runs import (
    ACTOR_NAMESPACE,
    OPEN_TURN,
    PAYER_KEY,
    PERSON_INTERRUPTS,
    RUN_NOW,
    StartResult,
    schedule_actor_name,
    schedule_pause_owner_may_not_post,
    schedule_run_delivered,
    schedule_run_delivery_failed,
    schedule_run_fail,
    schedule_run_settle,
    schedule_run_start,
    schedule_runs_start,
)

__all__ = [
    "ACTOR_NAMESPACE",
    "MAX_PROMPT_CHARS",
    "OPEN_TURN",
    "OWNER_LOST_ACCESS",
    "OWNER_MAY_NOT_POST",
    "PAYER_KEY",
    "PERSON_INTERRUPTS",
    "RUN_NOW",
    "TIMING_FIELDS",
    "UNSET",
    "StartResult",
    "manageable_ids",
    "may_manage",
    "owner_post_refusal",
    "person_timezone_set",
    "schedule_actor_name",
    "schedule_create",
    "schedule_delete",
    "schedule_pause",
    "schedule_pause_owner_may_not_post",
    "schedule_resume",
    "schedule_run_delivered",
    "schedule_run_delivery_failed",
    "schedule_run_fail",
    "schedule_run_now",
    "schedule_run_settle",
    "schedule_run_start",
    "schedule_runs_start",
    "schedule_spec",
    "schedule_update",
    "validate_spec",
]
