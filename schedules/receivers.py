"""Signal receivers of schedules: when a turn finishes, record the outcome of the run it
answered and start the next run waiting for that chat (no polling until the dispatcher's
next pass); when a channel adapter (the Telegram bridge) reports a reply delivered or given
up on, record the receipt of the run awaiting it."""

import logging

from chats.signals import reply_delivered, reply_delivery_failed, turn_finished
from schedules.models import ScheduleRun
from schedules.services import (
    schedule_run_delivered,
    schedule_run_delivery_failed,
    schedule_run_settle,
    schedule_run_start,
)

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


def _awaiting_run(turn_id) -> int | None:
    if turn_id is None:
        return None
    return (
        ScheduleRun.objects.filter(turn_id=turn_id, status=ScheduleRun.Status.AWAITING_DELIVERY)
        .values_list("id", flat=True)
        .first()
    )


def on_reply_delivered(sender, turn_id=None, receipt=None, **kwargs) -> None:
    run_id = _awaiting_run(turn_id)
    if run_id is not None:
        schedule_run_delivered(run_id=run_id, receipt=receipt or {})


def on_reply_delivery_failed(sender, turn_id=None, error="", receipt=None, **kwargs) -> None:
    run_id = _awaiting_run(turn_id)
    if run_id is not None:
        schedule_run_delivery_failed(run_id=run_id, error=error or "not delivered", receipt=receipt)


def connect() -> None:
    turn_finished.connect(on_turn_finished, dispatch_uid="schedules-turn-finished")
    reply_delivered.connect(on_reply_delivered, dispatch_uid="schedules-reply-delivered")
    reply_delivery_failed.connect(
        on_reply_delivery_failed, dispatch_uid="schedules-reply-delivery-failed"
    )
