"""The admin lists schedules and runs in a constant number of queries, read-only runs."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from schedules.dispatch import dispatch
from tests.schedules.conftest import T0

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["schedule", "schedulerun"])
def test_changelists_cost_the_same_for_many_rows(
    admin_client, make_schedule, model, django_assert_max_num_queries
):
    url = reverse(f"admin:schedules_{model}_changelist")
    make_schedule(kind="interval", interval_minutes=60, cron="")
    dispatch(now=T0 + timedelta(hours=3))  # missed runs
    admin_client.get(url)
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get(url).status_code == 200
    for _ in range(5):
        make_schedule(kind="interval", interval_minutes=60, cron="")
    dispatch(now=T0 + timedelta(hours=6))
    with django_assert_max_num_queries(len(few)):
        assert admin_client.get(url).status_code == 200
