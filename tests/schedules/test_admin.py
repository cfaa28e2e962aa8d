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


@pytest.fixture
def clerk(client, make_person):
    """Staff without superuser rights who may view, change and delete schedules and runs."""
    from django.contrib.auth.models import Permission

    clerk = make_person("clerk", is_staff=True)
    clerk.user_permissions.add(
        *Permission.objects.filter(
            codename__in=[
                "view_schedule",
                "change_schedule",
                "delete_schedule",
                "view_schedulerun",
                "delete_schedulerun",
            ]
        )
    )
    client.force_login(clerk)
    return clerk


def _change_form(schedule, **changes) -> dict:
    """What the admin's change form posts for `schedule`, with `changes` typed in."""
    data = {
        "owner": schedule.owner_id,
        "chat": schedule.chat_id,
        "prompt": schedule.prompt,
        "catch_up": schedule.catch_up,
        "mode": schedule.mode,
        "paused_reason": schedule.paused_reason,
        "runs-TOTAL_FORMS": "0",
        "runs-INITIAL_FORMS": "0",
        "runs-MIN_NUM_FORMS": "0",
        "runs-MAX_NUM_FORMS": "1000",
    }
    data.update(changes)
    return data


def test_staff_cannot_change_someone_elses_prompt_owner_or_chat_in_the_admin(
    client, clerk, make_schedule, owner, member, team_chat
):
    """Only the owner changes what a schedule asks (it is posted as "scheduled by <owner>",
    billed to them): in the admin the prompt, the owner and the chat are read-only, even for
    staff who may change schedules. What it may change goes through schedule_update."""
    from chats.services import chat_get_or_create, chat_member_ensure

    elsewhere, _ = chat_get_or_create(channel="web", chat_id="elsewhere", title="Elsewhere")
    chat_member_ensure(chat=elsewhere, person=member)
    schedule = make_schedule()
    url = reverse("admin:schedules_schedule_change", args=[schedule.pk])
    page = client.get(url)
    assert page.status_code == 200
    for field in ("prompt", "owner", "chat"):
        assert f'name="{field}"' not in page.content.decode()
    response = client.post(
        url,
        _change_form(
            schedule,
            prompt="I resign, effective immediately.",
            owner=member.pk,
            chat=elsewhere.pk,
            mode="isolated",
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    schedule.refresh_from_db()
    assert schedule.prompt == "Post the open incidents"
    assert (schedule.owner_id, schedule.chat_id) == (owner.pk, team_chat.pk)
    assert schedule.mode == "isolated"  # what staff may change, changed by the service
    # The next run posts the owner's own words in the owner's chat, billed to them.
    from schedules.services import schedule_run_now

    run = schedule_run_now(schedule=schedule, by=owner)
    assert run.trigger.text == "Post the open incidents"
    assert run.trigger.chat_id == team_chat.pk
    assert run.trigger.metadata["payer"] == owner.pk


def test_deleting_in_the_admin_goes_through_the_service(client, clerk, make_schedule):
    from schedules.models import Schedule

    schedule = make_schedule()
    url = reverse("admin:schedules_schedule_delete", args=[schedule.pk])
    assert client.post(url, {"post": "yes"}).status_code == 302
    assert not Schedule.objects.filter(pk=schedule.pk).exists()
    # A run's record is the dispatcher's: nobody deletes it in the admin.
    other = make_schedule()
    dispatch(now=T0 + timedelta(hours=3))
    run = other.runs.first()
    url = reverse("admin:schedules_schedulerun_delete", args=[run.pk])
    assert client.post(url, {"post": "yes"}).status_code == 403
