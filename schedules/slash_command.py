"""`/schedules` on every conversational channel (Telegram, the terminal): the chat's schedules
with a readable description, the next fire time and the last run's status, and
`/schedules pause ID`, `/schedules resume ID`, `/schedules run ID` (run it now).

Who may: only members of the chat (a Telegram account counts only through its linked,
active Person) see the list; pausing, resuming and running now follow
`schedules.services` (the schedule's owner, the chat's owners and admins, staff). A schedule
of another chat is "not in this chat", whoever asks, so ids of other chats reveal nothing.
When no scheduler has run lately the answer says first, plainly, that schedules will not
fire. The list shows no prompts and no owners' names: in a Telegram group everyone in the
group reads the answer, including people the hub does not know.
"""

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from chats.selectors import chat_still_readable
from chats.slash_commands import CommandContext, SlashCommand
from schedules.models import Schedule, ScheduleRun
from schedules.selectors import schedule_description, schedule_next_fire_times, scheduler_status
from schedules.services import (
    may_manage,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
)
from schedules.timing import zone

SHOWN = 20
USAGE = "Usage: /schedules, /schedules pause ID, /schedules resume ID, /schedules run ID"
NOT_MEMBER = (
    "Only members of this chat see its schedules. Link your Telegram account to your "
    "dashboard login (/link CODE) if you are one."
)
REFUSED = "Only its owner, this chat's owners and admins, and staff can {verb} schedule #{id}."
OPEN_RUN = (ScheduleRun.Status.DUE, ScheduleRun.Status.RUNNING)


def _when(instant, tz: str) -> str:
    return timezone.localtime(instant, zone(tz)).strftime("%Y-%m-%d %H:%M %Z")


def _line(schedule: Schedule, person) -> str:
    head = f"#{schedule.pk} {schedule_description(schedule)}"
    if schedule.owner_id == person.pk:
        head += " (yours)"
    if not schedule.enabled:
        state = f"paused: {schedule.paused_reason}" if schedule.paused_reason else "paused"
    else:
        upcoming = schedule_next_fire_times(schedule, count=1)
        state = f"next {_when(upcoming[0], schedule.timezone)}" if upcoming else "no more runs"
    last = schedule.runs.order_by("-slot_at", "-id").values_list("status", flat=True).first()
    last_text = f"last run: {ScheduleRun.Status(last).label.lower()}" if last else "no run yet"
    return f"• {head}\n  {state}; {last_text}"


def _listing(chat, person) -> str:
    schedules = list(Schedule.objects.filter(chat=chat).order_by("id")[: SHOWN + 1])
    lines = []
    status = scheduler_status()
    if not status.alive:
        lines.append(f"⚠️ {status.message[:1].upper()}{status.message[1:]}.")
    if not schedules:
        lines.append("No schedules in this chat.")
        return "\n".join(lines)
    lines.append("Schedules of this chat:")
    lines += [_line(schedule, person) for schedule in schedules[:SHOWN]]
    if len(schedules) > SHOWN:
        lines.append("… and more: the dashboard lists them all.")
    lines.append(USAGE.replace("Usage: /schedules, ", "Owners and admins: "))
    return "\n".join(lines)


def _act(verb: str, schedule: Schedule, person, channel: str) -> str:
    if verb == "pause":
        reason = f"paused from {channel} by {person.get_username()}"
        changed = schedule_pause(schedule=schedule, reason=reason, by=person)
        return f"Schedule #{schedule.pk} is paused." if changed else "It was paused already."
    if verb == "resume":
        changed = schedule_resume(schedule=schedule, by=person)
        if not changed:
            return f"Schedule #{schedule.pk} was not paused."
        return f"Schedule #{schedule.pk} runs again from now on."
    # run now: one open run at a time per schedule, however often someone asks.
    if not may_manage(person, schedule):  # before the bound: it tells outsiders nothing
        raise PermissionDenied
    if schedule.runs.filter(status__in=OPEN_RUN).exists():
        return f"Schedule #{schedule.pk} is already running or waiting to run."
    run = schedule_run_now(schedule=schedule, by=person)
    if run.status == ScheduleRun.Status.DUE:
        return f"Schedule #{schedule.pk} runs as soon as the chat is free."
    if run.status == ScheduleRun.Status.RUNNING:
        return f"Schedule #{schedule.pk} runs now."
    return f"Schedule #{schedule.pk} did not run: {run.reason or run.error or run.status}."


def schedules_command(context: CommandContext) -> str:
    """The chat's schedules as plain text for its members; pause, resume and run now for
    those `schedules.services` allows, a clear refusal (nothing changed) for anyone else."""
    chat, person = context.chat, context.person
    if chat is None:
        return "There is no chat here with schedules."
    if person is None or not chat_still_readable(person.pk, chat.pk):
        return NOT_MEMBER
    words = context.args.split()
    if not words:
        return _listing(chat, person)
    verb = words[0].lower()
    verb = {"run-now": "run", "runnow": "run"}.get(verb, verb)
    if verb not in ("pause", "resume", "run") or len(words) != 2:
        return USAGE
    number = words[1].lstrip("#")
    if not number.isdigit() or len(number) > 18:
        return USAGE
    schedule = (
        Schedule.objects.select_related("chat", "owner").filter(pk=int(number), chat=chat).first()
    )
    if schedule is None:
        return f"There is no schedule #{number} in this chat."
    try:
        return _act(verb, schedule, person, context.channel)
    except PermissionDenied as exc:
        if verb == "resume" and "can no longer read" in str(exc):
            return f"Schedule #{schedule.pk} stays paused: its owner can no longer read this chat."
        waits = verb in ("resume", "run") and schedule.approval != Schedule.Approval.APPROVED
        if waits and may_manage(person, schedule):
            # Refused for its approval, not for who asks: say that (the list shows it too).
            return f"Schedule #{schedule.pk} does not run: {exc}"
        return REFUSED.format(verb="run" if verb == "run" else verb, id=schedule.pk)


schedules_slash_command = SlashCommand(
    name="schedules",
    help="This chat's schedules; /schedules pause|resume|run ID",
    handler=schedules_command,
    uses_roles=True,
)
