"""Signal receivers of schedules: when a turn finishes, record the outcome of the run it
answered and start the next run waiting for that chat (no polling until the dispatcher's
next pass)."""

import logging

from chats.signals import turn_finished
from schedules.models import ScheduleRun
from schedules.services import schedule_run_settle, schedule_run_start

logger = logging.getLogger(__name__)


def on_turn_finished(sender, turn, status, **kwargs) -> None:
    run_id = (
        ScheduleRun.objects.filter(turn_id=turn.pk, status=ScheduleRun.Status.RUNNING)
        .values_list("id", flat=True)
        .first()
    )
    if run_id is not None:
        schedule_run_settle(run_id=run_id, turn=turn)
    waiting = (
        ScheduleRun.objects.filter(status=ScheduleRun.Status.DUE, schedule__chat_id=turn.chat_id)
        .order_by("slot_at", "id")
        .values_list("id", flat=True)
        .first()
    )
    if waiting is not None:
        schedule_run_start(run_id=waiting)


def connect() -> None:
    turn_finished.connect(on_turn_finished, dispatch_uid="schedules-turn-finished")
