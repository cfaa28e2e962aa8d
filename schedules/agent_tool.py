"""The agent's `schedule` tool: "remind us every Monday at 9" becomes a schedule of the
person who asked, in this chat.

Rules (docs/SECURITY.md, "Schedules"):
- The owner is the person behind the turn's trigger message. An author linked to no person
  (an unlinked Telegram user, an integration's user) cannot create one, and neither can a
  scheduled run (no schedule makes schedules) or a background review.
- In the asker's own private chat the schedule is created at once; in a shared chat it
  waits, disabled, for a chat admin (`schedules.proposals`).
- The tool only ever sees and changes schedules of the chat it runs in; pause, resume and
  delete go through `schedules.services`, which lets only the schedule's owner, the chat's
  admins and staff do them.
- With no scheduler running, every answer says first that schedules will not fire.
"""

from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery

from chats.agent.registry import ORIGIN_REVIEW, Tool, TurnContext
from schedules.models import Schedule, ScheduleRun
from schedules.proposals import schedule_create_by_agent
from schedules.selectors import schedule_description, scheduler_status
from schedules.services import (
    ACTOR_NAMESPACE,
    MAX_PROMPT_CHARS,
    schedule_delete,
    schedule_pause,
    schedule_resume,
)
from schedules.timing import ScheduleSpecError, zone

# The tool's argument for each field a ScheduleSpecError names.
ARGUMENT_OF_FIELD = {"tz": "timezone", "owner": "owner", "kind": "cron/every/at"}
LISTED = 20  # schedules one `list` answer shows (newest first)

# Kept short: the tool's definition is sent with every request in every chat.
DESCRIPTION = (
    "Prompts that run by themselves in this chat at set times, owned by the person asking "
    "('remind us every Monday at 9'). create: `prompt` (an instruction to yourself for then) "
    "and one of `cron` (5 fields, in `timezone`), `every` (minutes) or `at` (ISO time, once). "
    "In a shared chat a chat admin approves it first. `list` shows ids for pause/resume/delete."
)

PARAMETERS = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["create", "list", "pause", "resume", "delete"]},
        "prompt": {"type": "string", "maxLength": MAX_PROMPT_CHARS},
        "cron": {"type": "string", "maxLength": 255},
        "every": {"type": "integer", "minimum": 1},
        "at": {"type": "string", "maxLength": 64},
        "timezone": {"type": "string", "maxLength": 64, "description": "IANA, e.g. Europe/Berlin"},
        "mode": {
            "type": "string",
            "enum": ["chat", "isolated"],
            "description": "isolated: each run sees only this schedule's earlier runs",
        },
        "id": {"type": "integer", "minimum": 1},
    },
    "required": ["action"],
    "additionalProperties": False,
}


class _Refused(Exception):
    pass


def _scheduled_run(context: TurnContext) -> bool:
    actor = context.actor
    if actor is not None and actor.namespace == ACTOR_NAMESPACE:
        return True
    metadata = context.trigger.metadata if isinstance(context.trigger.metadata, dict) else {}
    return "schedule_run" in metadata


def _asker(context: TurnContext, action: str):
    """The person who may act through this call, or _Refused saying why not."""
    if _scheduled_run(context):
        raise _Refused(f"Error: a scheduled run cannot {action} schedules. Nothing changed.")
    if context.origin == ORIGIN_REVIEW:
        raise _Refused(f"Error: a background review cannot {action} schedules.")
    person = context.person
    if person is None or not person.is_active:
        raise _Refused(
            f"Error: the author of this message has no hub account, so they cannot {action} a "
            "schedule (a schedule belongs to a person; on Telegram, /link connects an account)."
            " Nothing changed."
        )
    return person


def _when(moment: datetime | None, tz: str) -> str:
    if moment is None:
        return "none"
    return moment.astimezone(zone(tz)).strftime("%Y-%m-%d %H:%M %Z")


def _state(schedule: Schedule) -> str:
    if schedule.approval == Schedule.Approval.PENDING:
        return "waiting for a chat admin's approval"
    if schedule.approval == Schedule.Approval.REJECTED:
        return f"rejected ({schedule.paused_reason})" if schedule.paused_reason else "rejected"
    if not schedule.enabled:
        return f"paused ({schedule.paused_reason})" if schedule.paused_reason else "paused"
    return "active"


def _create(context: TurnContext, arguments: dict) -> str:
    person = _asker(context, "create")
    given = [name for name in ("cron", "every", "at") if arguments.get(name) not in (None, "")]
    if len(given) != 1:
        return "Error: give exactly one of `cron`, `every` or `at`. Nothing created."
    tz = (arguments.get("timezone") or "").strip() or settings.TIME_ZONE
    fields = {"kind": Schedule.Kind.CRON}
    try:
        if given == ["every"]:
            fields = {"kind": Schedule.Kind.INTERVAL, "interval_minutes": arguments["every"]}
        elif given == ["at"]:
            fields = {"kind": Schedule.Kind.ONCE, "run_at": _parse_at(arguments["at"], tz)}
        else:
            fields["cron"] = arguments["cron"]
        schedule = schedule_create_by_agent(
            owner=person,
            chat=context.chat,
            prompt=arguments.get("prompt") or "",
            tz=tz,
            mode=arguments.get("mode") or Schedule.Mode.CHAT,
            **fields,
        )
    except ScheduleSpecError as exc:
        field = ARGUMENT_OF_FIELD.get(exc.field, exc.field)
        return f"Error in `{field}`: {exc}. Nothing created."
    except PermissionDenied as exc:
        return f"Error: {exc} Nothing created."
    described = schedule_description(schedule)
    if schedule.approval == Schedule.Approval.PENDING:
        return (
            f"Proposed schedule #{schedule.pk} ({described}), owned by "
            f"{person.get_username()}. This is a shared chat: it waits for a chat admin's "
            "approval (Approvals page or Telegram buttons) and does not run before."
        )
    return (
        f"Created schedule #{schedule.pk} ({described}), owned by {person.get_username()}; "
        f"next run: {_when(schedule.next_fire_at, schedule.timezone)}."
    )


def _parse_at(text: str, tz: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ScheduleSpecError("at", f"{text!r} is not an ISO date and time") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(tz))
    return moment


def _list(context: TurnContext) -> str:
    newest = ScheduleRun.objects.filter(schedule=OuterRef("pk")).order_by("-slot_at", "-id")
    schedules = list(
        Schedule.objects.filter(chat=context.chat)
        .select_related("owner")
        .annotate(
            last_status=Subquery(newest.values("status")[:1]),
            last_slot_at=Subquery(newest.values("slot_at")[:1]),
            last_note=Subquery(newest.values("error")[:1]),
            last_reason=Subquery(newest.values("reason")[:1]),
        )
        .order_by("-id")[: LISTED + 1]
    )
    if not schedules:
        return "This chat has no schedules."
    head = "Schedules of this chat, newest first"
    if len(schedules) > LISTED:
        head += f" (the newest {LISTED} shown)"
    lines = [head + ":"]
    for schedule in schedules[:LISTED]:
        last = "never ran"
        if schedule.last_status:
            label = ScheduleRun.Status(schedule.last_status).label.lower()
            last = f"{label} at {_when(schedule.last_slot_at, schedule.timezone)}"
            note = schedule.last_note or schedule.last_reason
            if note:
                last += f" ({note[:120]})"
        prompt = " ".join(schedule.prompt.split())
        if len(prompt) > 120:
            prompt = prompt[:119] + "…"
        next_run = _when(schedule.next_fire_at, schedule.timezone) if schedule.enabled else "none"
        lines.append(
            f"- #{schedule.pk} {schedule_description(schedule)}, mode {schedule.mode}, owner "
            f"{schedule.owner.get_username()}, {_state(schedule)}; next run: {next_run}; "
            f"last run: {last}; prompt: {prompt}"
        )
    return "\n".join(lines)


def _change(context: TurnContext, arguments: dict) -> str:
    action = arguments["action"]
    person = _asker(context, action)
    schedule_id = arguments.get("id")
    if not schedule_id:
        return f"Error: `{action}` needs the schedule's `id` (see `list`)."
    schedule = Schedule.objects.filter(pk=schedule_id, chat=context.chat).first()
    if schedule is None:
        return f"Error: this chat has no schedule #{schedule_id}."
    try:
        if action == "pause":
            done = schedule_pause(
                schedule=schedule, reason=f"paused by {person.get_username()}", by=person
            )
            return f"Paused schedule #{schedule.pk}." if done else "It was paused already."
        if action == "resume":
            done = schedule_resume(schedule=schedule, by=person)
            if not done:
                return f"Schedule #{schedule.pk} was running already."
            return (
                f"Resumed schedule #{schedule.pk}; next run: "
                f"{_when(schedule.next_fire_at, schedule.timezone)}."
            )
        schedule_delete(schedule=schedule, by=person)
        return f"Deleted schedule #{schedule_id}."
    except PermissionDenied as exc:
        return f"Error: {exc} Nothing changed."


def _schedule(context: TurnContext, arguments: dict) -> str:
    action = arguments["action"]
    try:
        if action == "create":
            answer = _create(context, arguments)
        elif action == "list":
            answer = _list(context)
        else:
            answer = _change(context, arguments)
    except _Refused as refused:
        answer = str(refused)
    status = scheduler_status()
    if not status.alive:
        # Said first and plainly: nothing may look as if it will run when no scheduler runs.
        answer = f"Warning: {status.message}.\n{answer}"
    return answer


SCHEDULE_TOOL = Tool(
    name="schedule",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    handler=_schedule,
    timeout_seconds=15,
)


class ScheduleTools:
    """The schedules app's tool provider."""

    def tools(self):
        return [SCHEDULE_TOOL]


schedule_tools = ScheduleTools()
