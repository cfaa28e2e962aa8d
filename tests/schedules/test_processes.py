"""Exactly once with two dispatcher processes (two beats): both are started, set up and
held at a barrier (a line on their standard input), then released together into the same
slot boundary; each slot is recorded and started once, on SQLite and PostgreSQL."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings

from chats.models import Message, Turn
from schedules.models import ScheduleRun
from tests.live import BASE_DIR, database_url_for_subprocesses
from tests.schedules.conftest import T0

WAIT = 120  # seconds a process may take before the test gives up (a hang, not a measurement)

DISPATCHER = """
import json, sys
from datetime import datetime
import django
django.setup()
from schedules.dispatch import dispatch
print("ready", flush=True)
now = datetime.fromisoformat(sys.stdin.readline().strip())
result = dispatch(now=now)
print(json.dumps({"claimed": result.claimed, "started": result.started}), flush=True)
"""


@pytest.mark.storage
@pytest.mark.django_db(transaction=True)
def test_two_dispatcher_processes_run_each_slot_once(make_schedule):
    schedules = [make_schedule(), make_schedule(catch_up="once")]
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_subprocesses(),
        "REDIS_URL": settings.REDIS_URL,
        "REDIS_KEY_PREFIX": settings.REDIS_KEY_PREFIX,
        "SECRET_KEY": settings.SECRET_KEY,
        "DJANGO_SETTINGS_MODULE": "hermes_site.settings",
        "PYTHONPATH": str(BASE_DIR),
        "LOG_LEVEL": "WARNING",
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", DISPATCHER],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for process in processes:
            assert process.stdout.readline().strip() == "ready"
        # 08:00:01: the 07:00 slot was missed, the 08:00 slot is due, for both schedules.
        now = (T0 + timedelta(hours=2, seconds=1)).isoformat()
        for process in processes:
            process.stdin.write(now + "\n")
            process.stdin.flush()
        results = [json.loads(process.stdout.readline()) for process in processes]
        for process in processes:
            assert process.wait(WAIT) == 0
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert sum(result["claimed"] for result in results) == 4
    assert sum(result["started"] for result in results) == 1  # one chat: one run at a time
    for schedule in schedules:
        slots = list(schedule.runs.order_by("slot_at").values_list("slot_at", flat=True))
        assert slots == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
    statuses = sorted(ScheduleRun.objects.values_list("status", flat=True))
    assert statuses == ["due", "missed", "missed", "running"]
    assert Turn.objects.count() == 1 and Message.objects.count() == 1
