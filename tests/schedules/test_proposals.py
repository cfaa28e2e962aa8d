"""Schedules the agent proposes in shared chats: nothing runs before a chat admin approves;
only the chat's owners and admins decide (not the proposer who is no admin, not another
member, not an outsider, not an admin of another chat); a decision is taken once; the
Approvals page shows them to those who decide and lets them decide, alone or in bulk."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from chats.approvals import approvals_pending_count
from chats.models import ChatKind, ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from schedules.dispatch import dispatch
from schedules.models import Schedule
from schedules.proposals import (
    ApprovalInvalid,
    ApprovalNotAllowed,
    ApprovalStale,
    schedule_approval_decide,
    schedule_create_by_agent,
    schedules_pending_for,
)
from schedules.services import schedule_resume, schedule_run_now
from tests.schedules.agent_helpers import beat, call, in_group, said

pytestmark = pytest.mark.django_db

Approval = Schedule.Approval


def propose(chat, person, **fields):
    fields.setdefault("prompt", "Remind everyone of the planning meeting.")
    fields.setdefault("kind", "cron")
    fields.setdefault("cron", "0 9 * * 1")
    return schedule_create_by_agent(owner=person, chat=chat, **fields)


@pytest.fixture
def nina(make_person, group):
    """Another plain member of the group."""
    person = make_person("nina")
    said("hi", chat_id="-100", user="14", name="Nina", kind=ChatKind.GROUP, person=person)
    return person


def test_an_admin_approves_and_then_it_runs(owner, member, group):
    schedule = propose(group, member)  # marco asked; olivia is the group's admin
    assert not schedule.enabled and schedule.approval == Approval.PENDING
    approved = schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    assert approved.enabled and approved.approval == Approval.APPROVED
    assert approved.approval_by == owner and approved.approval_at is not None
    assert approved.paused_reason == "" and approved.next_fire_at is not None
    result = dispatch(now=approved.next_fire_at + timedelta(seconds=1))
    assert (result.claimed, result.started) == (1, 1)


def test_an_admin_rejects_and_it_never_runs(owner, member, group):
    schedule = propose(group, member)
    rejected = schedule_approval_decide(schedule_id=schedule.pk, decision="reject", person=owner)
    assert not rejected.enabled and rejected.approval == Approval.REJECTED
    assert rejected.paused_reason == "rejected by olivia"
    # Neither its owner nor the admin can run it around the decision.
    with pytest.raises(PermissionDenied, match="rejected"):
        schedule_resume(schedule=rejected, by=member)
    with pytest.raises(PermissionDenied, match="rejected"):
        schedule_run_now(schedule=rejected, by=owner)
    assert not rejected.runs.exists()


def test_a_pending_schedule_cannot_be_run_now(owner, member, group):
    schedule = propose(group, member)
    with pytest.raises(PermissionDenied, match="waiting for a chat admin"):
        schedule_run_now(schedule=schedule, by=owner)  # even by the admin
    assert not schedule.runs.exists()


def test_the_proposer_who_is_no_admin_cannot_approve(member, group):
    schedule = propose(group, member)
    with pytest.raises(ApprovalNotAllowed):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=member)
    schedule.refresh_from_db()
    assert schedule.approval == Approval.PENDING and not schedule.enabled


def test_another_member_of_the_group_cannot_decide(member, group, nina):
    schedule = propose(group, member)
    for decision in ("approve", "reject"):
        with pytest.raises(ApprovalNotAllowed):
            schedule_approval_decide(schedule_id=schedule.pk, decision=decision, person=nina)
    assert Schedule.objects.get(pk=schedule.pk).approval == Approval.PENDING


def test_an_outsider_cannot_decide(member, outsider, group):
    schedule = propose(group, member)
    with pytest.raises(ApprovalNotAllowed):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=outsider)
    with pytest.raises(ApprovalNotAllowed):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=None)
    assert Schedule.objects.get(pk=schedule.pk).approval == Approval.PENDING


def test_an_admin_of_another_chat_cannot_decide(make_person, member, group):
    schedule = propose(group, member)
    other_admin = make_person("ada")
    room, _ = chat_get_or_create(channel="web", chat_id="other-room", kind=ChatKind.ROOM)
    chat_member_ensure(chat=room, person=other_admin, role=ChatMember.Role.OWNER)
    with pytest.raises(ApprovalNotAllowed):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=other_admin)
    assert not schedules_pending_for(other_admin).exists()


def test_a_demoted_or_deactivated_admin_no_longer_decides(owner, member, group):
    schedule = propose(group, member)
    ChatMember.objects.filter(chat=group, person=owner).update(role=ChatMember.Role.MEMBER)
    with pytest.raises(ApprovalNotAllowed):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    ChatMember.objects.filter(chat=group, person=owner).update(role=ChatMember.Role.ADMIN)
    owner.is_active = False
    owner.save()
    with pytest.raises(ApprovalNotAllowed):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)


def test_an_admin_who_proposed_may_approve_their_own(owner, group):
    schedule = propose(group, owner)
    assert schedule.approval == Approval.PENDING  # a shared chat: it waits all the same
    schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    assert Schedule.objects.get(pk=schedule.pk).enabled


def test_a_decision_is_taken_once(owner, member, group, make_person):
    schedule = propose(group, member)
    second_admin = make_person("ada")
    chat_member_ensure(chat=group, person=second_admin, role=ChatMember.Role.ADMIN)
    schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    with pytest.raises(ApprovalStale, match="Already approved by olivia"):
        schedule_approval_decide(schedule_id=schedule.pk, decision="reject", person=second_admin)
    with pytest.raises(ApprovalStale):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    assert Schedule.objects.get(pk=schedule.pk).approval_by == owner

    rejected = propose(group, member)
    schedule_approval_decide(schedule_id=rejected.pk, decision="reject", person=second_admin)
    with pytest.raises(ApprovalStale, match="Already rejected by ada"):
        schedule_approval_decide(schedule_id=rejected.pk, decision="approve", person=owner)
    assert not Schedule.objects.get(pk=rejected.pk).enabled


def test_an_owner_who_left_the_chat_cannot_have_it_approved(owner, member, group):
    schedule = propose(group, member)
    ChatMember.objects.filter(chat=group, person=member).delete()
    with pytest.raises(ApprovalInvalid, match="its owner can no longer read this chat"):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    schedule.refresh_from_db()
    assert schedule.approval == Approval.REJECTED and not schedule.enabled


def test_a_forum_topics_proposal_is_decided_by_its_groups_admins(owner, member, group, nina):
    topic = said(
        "in the topic",
        chat_id="-100",
        user="11",
        name="Marco",
        kind=ChatKind.TOPIC,
        thread_id="7",
        person=member,
    ).chat
    schedule = propose(topic, member)
    assert schedule.approval == Approval.PENDING
    assert list(schedules_pending_for(owner)) == [schedule]
    assert not schedules_pending_for(member).exists() and not schedules_pending_for(nina).exists()
    with pytest.raises(ApprovalNotAllowed):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=nina)
    schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    assert Schedule.objects.get(pk=schedule.pk).enabled


def test_the_tool_in_a_group_then_an_admin_approves(owner, member, group):
    beat()
    call(in_group(user="11", name="Marco"), action="create", every=60, prompt="Check the queue.")
    schedule = Schedule.objects.get()
    assert schedule.owner == member and schedule.approval == Approval.PENDING
    assert approvals_pending_count(owner) == 1 and approvals_pending_count(member) == 0
    schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    assert approvals_pending_count(owner) == 0
    answer = call(in_group(user="11", name="Marco"), action="list")
    assert f"#{schedule.pk} Every hour" in answer and ", active; next run: " in answer


# --- the Approvals page ---------------------------------------------------------------


def test_the_approvals_page_shows_them_to_the_chats_admins_only(
    client, owner, member, outsider, team_chat
):
    schedule = propose(team_chat, member, prompt="Post the <b>open</b> incidents")
    client.force_login(owner)
    page = client.get(reverse("memory_approvals")).content.decode()
    assert f'id="schedule-proposal-{schedule.pk}"' in page
    assert "Post the &lt;b&gt;open&lt;/b&gt; incidents" in page and "asked by marco" in page
    assert "At 09:00, only on Monday" in page and "first run if approved now" in page
    for person in (member, outsider):
        client.force_login(person)
        page = client.get(reverse("memory_approvals")).content.decode()
        assert "schedule-proposal-" not in page and "open</b> incidents" not in page


def test_an_admin_decides_on_the_page_and_a_second_decision_is_refused(
    client, owner, member, team_chat
):
    schedule = propose(team_chat, member)
    client.force_login(owner)
    url = reverse("schedule_proposal_decide", args=[schedule.pk])
    answer = client.post(url, {"decision": "approve"}, headers={"HX-Request": "true"})
    assert answer.status_code == 200
    assert f"Schedule #{schedule.pk} approved." in answer.content.decode()
    assert Schedule.objects.get(pk=schedule.pk).enabled
    again = client.post(url, {"decision": "reject"}, headers={"HX-Request": "true"})
    assert again.status_code == 409 and "Already approved by olivia" in again.content.decode()
    assert Schedule.objects.get(pk=schedule.pk).approval == Approval.APPROVED
    # Without JavaScript: back to the page with a message.
    other = propose(team_chat, member)
    answer = client.post(
        reverse("schedule_proposal_decide", args=[other.pk]), {"decision": "reject"}
    )
    assert answer.status_code == 302 and answer.url == reverse("memory_approvals")
    assert Schedule.objects.get(pk=other.pk).approval == Approval.REJECTED


@pytest.mark.parametrize("who", ["member", "outsider"])
def test_others_get_not_found_on_the_page_and_nothing_changes(
    client, request, member, team_chat, who
):
    schedule = propose(team_chat, member)
    client.force_login(request.getfixturevalue(who))
    url = reverse("schedule_proposal_decide", args=[schedule.pk])
    assert client.post(url, {"decision": "approve"}).status_code == 404
    assert (
        client.post(
            reverse("schedule_proposal_decide", args=[999999]), {"decision": "approve"}
        ).status_code
        == 404
    )
    assert Schedule.objects.get(pk=schedule.pk).approval == Approval.PENDING


def test_bulk_decisions_decide_the_ticked_schedules_as_the_admin(
    client, owner, member, team_chat, group
):
    first, second = propose(team_chat, member), propose(team_chat, member)
    elsewhere = propose(group, member)  # olivia is the group's admin too
    ChatMember.objects.filter(chat=group, person=owner).update(role=ChatMember.Role.MEMBER)
    client.force_login(owner)
    answer = client.post(
        reverse("memory_decide_selected"),
        {"decision": "approve", "schedule": [first.pk, second.pk, elsewhere.pk]},
    )
    assert answer.status_code == 302
    states = dict(Schedule.objects.values_list("pk", "approval"))
    assert states == {
        first.pk: Approval.APPROVED,
        second.pk: Approval.APPROVED,
        elsewhere.pk: Approval.PENDING,  # no longer her decision
    }
    assert (
        client.post(
            reverse("memory_decide_selected"), {"decision": "approve", "schedule": ["x"]}
        ).status_code
        == 302
    )


def test_staff_cannot_enable_a_pending_schedule_in_the_admin(client, make_person, member, group):
    schedule = propose(group, member)
    staff = make_person("sam", is_staff=True, is_superuser=True)
    client.force_login(staff)
    url = reverse("admin:schedules_schedule_change", args=[schedule.pk])
    page = client.get(url).content.decode()
    assert 'name="enabled"' not in page  # shown, not editable
    assert Schedule.objects.get(pk=schedule.pk).approval == Approval.PENDING


def test_a_one_off_whose_time_passed_while_it_waited_is_rejected(owner, member, group):
    from freezegun import freeze_time

    from tests.schedules.conftest import T0

    with freeze_time(T0):
        schedule = propose(group, member, kind="once", cron="", run_at=T0 + timedelta(hours=1))
    later = freeze_time(T0 + timedelta(hours=2))
    with later, pytest.raises(ApprovalInvalid, match="its time passed while it waited"):
        schedule_approval_decide(schedule_id=schedule.pk, decision="approve", person=owner)
    schedule.refresh_from_db()
    assert schedule.approval == Approval.REJECTED and not schedule.enabled
    assert schedule.paused_reason == "not approved: its time passed while it waited"
