"""Exactly once under concurrency: two dispatchers that computed the same due slots at the
same moment (two beats) record and start each slot once, on SQLite and PostgreSQL."""

import threading
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection

from chats.models import Message, Turn
from schedules import dispatch as dispatch_module
from schedules.models import ScheduleRun
from tests.schedules.conftest import T0

WAIT = 60  # seconds a thread may wait before the test gives up (a hang, not a measurement)


@pytest.mark.storage
@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_racing_record_and_start_each_slot_once(make_schedule, monkeypatch):
    schedules = [make_schedule(catch_up="skip"), make_schedule(catch_up="once")]
    # Both passes plan their rows before either inserts: the race the constraint must win.
    planned = threading.Barrier(2, timeout=WAIT)
    plan = dispatch_module.plan_runs

    def plan_then_wait(schedule, now, token):
        rows = plan(schedule, now, token)
        if schedule.pk == schedules[-1].pk:
            planned.wait()
        return rows

    monkeypatch.setattr(dispatch_module, "plan_runs", plan_then_wait)
    # 08:01: the 07:00 slot is missed, the 08:00 slot is due, for both schedules.
    now = T0 + timedelta(hours=2, minutes=1)
    results, errors = [], []

    def run():
        try:
            results.append(dispatch_module.dispatch(now=now))
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors
    assert sum(result.claimed for result in results) == 4  # each slot claimed by one pass
    for schedule in schedules:
        slots = list(schedule.runs.order_by("slot_at").values_list("slot_at", flat=True))
        assert slots == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    # One chat, two schedules due: one run starts, the other waits for the chat to be free.
    statuses = sorted(ScheduleRun.objects.values_list("status", flat=True))
    assert statuses == ["due", "missed", "missed", "running"]
    assert Turn.objects.count() == 1
    assert Message.objects.count() == 1
