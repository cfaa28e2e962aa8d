"""Operators' schedules: `schedule add`, `schedule list`, `schedule run-now ID`, through the
same services as every other surface (the owner rule and the limits apply)."""

from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError

from chats.models import Chat
from schedules.models import Schedule
from schedules.selectors import schedule_description, scheduler_status, schedules_with_last_run
from schedules.services import schedule_create, schedule_run_now
from schedules.timing import ScheduleSpecError, zone


class Command(BaseCommand):
    help = "Add, list and run schedules (prompts that run on time in a chat)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="create a schedule")
        add.add_argument("--chat", required=True, help="the target chat's key, e.g. web:ops")
        add.add_argument("--owner", required=True, help="username of the owning person")
        when = add.add_mutually_exclusive_group(required=True)
        when.add_argument("--cron", help='a 5-field cron expression, e.g. "0 9 * * 1-5"')
        when.add_argument("--every", type=int, help="an interval in minutes")
        when.add_argument("--at", help="once, at this ISO time (e.g. 2026-12-01T09:00)")
        add.add_argument("--tz", default="", help="IANA time zone (default: TIME_ZONE)")
        add.add_argument("--prompt", required=True)
        add.add_argument("--catch-up", choices=["skip", "once"], default="skip")
        sub.add_parser("list", help="every schedule with its last run")
        run = sub.add_parser("run-now", help="run a schedule now, outside its slots")
        run.add_argument("id", type=int)

    def handle(self, *args, action: str, **options):
        """Each action calls one service; refusals become CommandError with their reason."""
        try:
            if action == "add":
                return self._add(**options)
            if action == "list":
                return self._list()
            return self._run_now(options["id"])
        except (ScheduleSpecError, PermissionDenied) as exc:
            raise CommandError(str(exc)) from exc

    def _add(self, *, chat, owner, cron, every, at, tz, prompt, catch_up, **_):
        person = get_user_model().objects.filter(username=owner).first()
        if person is None:
            raise CommandError(f"No person with username {owner!r}.")
        target = Chat.objects.filter(chat_key=chat).first()
        if target is None:
            raise CommandError(f"No chat with key {chat!r}.")
        run_at = None
        if at:
            try:
                run_at = datetime.fromisoformat(at)
            except ValueError as exc:
                raise CommandError(f"--at {at!r} is not an ISO date and time") from exc
            if run_at.tzinfo is None:
                from django.conf import settings

                run_at = run_at.replace(tzinfo=zone(tz or settings.TIME_ZONE))
        kind = (
            Schedule.Kind.CRON if cron else Schedule.Kind.INTERVAL if every else Schedule.Kind.ONCE
        )
        schedule = schedule_create(
            owner=person,
            chat=target,
            prompt=prompt,
            kind=kind,
            cron=cron or "",
            interval_minutes=every,
            run_at=run_at,
            tz=tz,
            catch_up=catch_up,
        )
        self.stdout.write(
            f"schedule {schedule.pk}: {schedule_description(schedule)}; next run at "
            f"{schedule.next_fire_at:%Y-%m-%d %H:%M} UTC"
        )

    def _list(self):
        status = scheduler_status()
        if not status.alive:
            self.stdout.write(f"WARNING: {status.message}")
        rows = list(schedules_with_last_run())
        if not rows:
            self.stdout.write("no schedules")
        for schedule in rows:
            state = "enabled" if schedule.enabled else f"paused ({schedule.paused_reason})"
            last = "never ran"
            if schedule.last_status:
                slot = f"{schedule.last_slot_at:%Y-%m-%d %H:%M}"
                last = f"last run {slot} UTC: {schedule.last_status}"
                if schedule.last_error:
                    last += f" ({schedule.last_error.splitlines()[0][:80]})"
            following = (
                f"next {schedule.next_fire_at:%Y-%m-%d %H:%M} UTC"
                if schedule.enabled and schedule.next_fire_at
                else "no next run"
            )
            self.stdout.write(
                f"{schedule.pk}\t{schedule.chat.chat_key}\t{schedule.owner.get_username()}\t"
                f"{schedule_description(schedule)}\t{state}\t{following}\t{last}"
            )

    def _run_now(self, schedule_id: int):
        schedule = Schedule.objects.select_related("owner", "chat").filter(pk=schedule_id).first()
        if schedule is None:
            raise CommandError(f"No schedule {schedule_id}.")
        run = schedule_run_now(schedule=schedule)
        if run.status == run.Status.RUNNING:
            self.stdout.write(f"run {run.pk} started: turn {run.turn_id}")
        elif run.status == run.Status.DUE:
            self.stdout.write(f"run {run.pk} waits for the chat to be free (a turn is open)")
        else:
            self.stdout.write(f"run {run.pk}: {run.status} ({run.reason or run.error})")
