"""Fixtures of the schedules' tests: a schedule in the team room owned by its owner, made at
a fixed time (freezegun) so its slots are known."""

from datetime import UTC, datetime

import pytest
from freezegun import freeze_time

from schedules.services import schedule_create

# A Tuesday morning in summer time (Europe/Berlin is UTC+2).
T0 = datetime(2026, 7, 7, 6, 0, tzinfo=UTC)


@pytest.fixture
def make_schedule(team_chat, owner):
    def make(*, at=T0, chat=None, person=None, **fields):
        fields.setdefault("prompt", "Post the open incidents")
        fields.setdefault("kind", "cron")
        fields.setdefault("cron", "0 * * * *")
        fields.setdefault("tz", "UTC")
        with freeze_time(at):
            return schedule_create(owner=person or owner, chat=chat or team_chat, **fields)

    return make


# The agent tool's fixtures (a Telegram group with an admin, olivia's private chat).
from tests.schedules.agent_helpers import group, olivia_dm  # noqa: E402, F401
