"""Skill proposals expire: beat's periodic task expires the pending ones older than
SKILLS_PROPOSAL_TTL_DAYS and those on a skill that was archived meanwhile, each with an audit
event, and tells the chat each came from (and Telegram, for a Telegram chat); decided
proposals are never touched, and a second run changes nothing more."""

from datetime import timedelta

import pytest
from django.utils import timezone

from bots.models import OutboundMessage
from chats.models import ChatKind, Message
from chats.services import actor_get_or_create, chat_get_or_create
from hermes_site.celery import periodic_tasks
from skills.models import Skill, SkillEvent, SkillProposal
from skills.reviews import skill_proposal_decide, skill_set_status
from skills.services import Author, SkillConflict, skill_create, skill_patch
from skills.tasks import EXPIRE_TASK, expire_proposals
from tests.chats.dashboard_helpers import login
from tests.skills.helpers import skill_md

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

Status = SkillProposal.Status


@pytest.fixture(autouse=True)
def ttl(settings):
    settings.SKILLS_PROPOSAL_TTL_DAYS = 14
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"


def aged(proposal: SkillProposal, days: float) -> SkillProposal:
    SkillProposal.objects.filter(pk=proposal.pk).update(
        created_at=timezone.now() - timedelta(days=days)
    )
    proposal.refresh_from_db()
    return proposal


def notices(chat) -> list[Message]:
    return list(Message.objects.filter(chat=chat, metadata__notice="skills-expiry"))


@pytest.fixture
def web_author(member):
    """marco in a web room: his changes wait for a reviewer, his room gets the notices."""
    chat, _ = chat_get_or_create(channel="web", chat_id="ops-room", title="Ops room")
    actor = actor_get_or_create(channel="web", user_id="marco", display_name="Marco")
    return Author(actor=actor, person=member, chat=chat)


def test_old_proposals_expire_with_an_audit_event_and_a_notice(
    skill, group_author, web_author, staff_reviewer
):
    old = aged(
        skill_patch(
            name="deploy-staging",
            old_string="make image",
            new_string="make fast",
            author=group_author,
        ).proposal,
        15,
    )
    fresh = skill_create(name="triage", content=skill_md(name="triage"), author=group_author)
    fresh = aged(fresh.proposal, 13)
    approved = skill_create(name="runbook", content=skill_md(name="runbook"), author=web_author)
    skill_proposal_decide(
        proposal_id=approved.proposal.pk,
        decision="approve",
        shown_version=None,
        person=staff_reviewer,
    )
    rejected = skill_create(name="howto", content=skill_md(name="howto"), author=web_author)
    skill_proposal_decide(
        proposal_id=rejected.proposal.pk,
        decision="reject",
        shown_version=None,
        person=staff_reviewer,
    )
    aged(approved.proposal, 30), aged(rejected.proposal, 30)

    assert expire_proposals() == 1
    old.refresh_from_db()
    assert old.status == Status.EXPIRED and old.decided_at is not None and old.decided_by is None
    statuses = dict(SkillProposal.objects.values_list("slug", "status"))
    assert statuses == {
        "deploy-staging": Status.EXPIRED,
        "triage": Status.PENDING,
        "runbook": Status.APPROVED,
        "howto": Status.REJECTED,
    }
    event = SkillEvent.objects.get(kind=SkillEvent.Kind.EXPIRED)
    assert (event.proposal, event.slug, event.via) == (old, "deploy-staging", "system")
    assert event.detail["reason"] == "ttl" and event.detail["ttl_days"] == 14
    assert Skill.objects.get(slug="deploy-staging").current_version.number == 1  # unchanged

    # The chat it was asked in hears it: in the history (never read by the model)…
    [notice] = notices(group_author.chat)
    assert notice.role == Message.Role.SYSTEM
    assert "patch of deploy-staging" in notice.text and "14 days" in notice.text
    assert "nothing was changed" in notice.text
    assert notices(web_author.chat) == []  # its proposals were decided
    # …and on Telegram, since it is a Telegram group.
    [sent] = OutboundMessage.objects.filter(kind="send", telegram_chat_id=-1001)
    assert "patch of deploy-staging" in sent.payload["text"]

    # Idempotent: a second run (or a doubled beat) changes and says nothing more.
    assert expire_proposals() == 0
    assert SkillEvent.objects.filter(kind=SkillEvent.Kind.EXPIRED).count() == 1
    assert len(notices(group_author.chat)) == 1 and OutboundMessage.objects.count() == 1


def test_a_pending_proposal_on_a_skill_archived_meanwhile_expires_at_once(
    proposal, group_author, staff_reviewer
):
    skill_set_status(name="deploy-staging", archived=True, person=staff_reviewer)
    assert expire_proposals() == 1
    proposal.refresh_from_db()
    assert proposal.status == Status.EXPIRED
    event = SkillEvent.objects.get(kind=SkillEvent.Kind.EXPIRED)
    assert event.detail["reason"] == "archived"
    [notice] = notices(group_author.chat)
    assert "deploy-staging" in notice.text and "archived" in notice.text
    assert expire_proposals() == 0


def test_an_expired_proposal_can_no_longer_be_decided_nor_is_it_offered(proposal, staff_reviewer):
    aged(proposal, 20)
    expire_proposals()
    with pytest.raises(SkillConflict):
        skill_proposal_decide(
            proposal_id=proposal.pk, decision="approve", shown_version=1, person=staff_reviewer
        )
    page = login(staff_reviewer).get("/memory/approvals/").text
    assert f'id="skill-proposal-{proposal.pk}"' not in page and "Nothing waits" in page
    response = login(staff_reviewer).post(
        f"/skills/proposals/{proposal.pk}/decide",
        {"decision": "approve", "shown_version": "1"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 409
    assert "expired before your decision: nothing was changed." in response.text
    assert Skill.objects.get(slug="deploy-staging").current_version.number == 1


def test_a_proposal_from_no_chat_expires_without_a_notice(skill):
    """The curator's merge proposals (via=system) come from no chat: only the audit event."""
    proposal = SkillProposal.objects.create(
        skill=skill,
        slug="deploy-staging",
        action="edit",
        base_number=1,
        skill_md=skill_md(),
        content_hash="merge",
        via="system",
    )
    aged(proposal, 30)
    assert expire_proposals() == 1
    assert not Message.objects.filter(metadata__notice="skills-expiry").exists()
    assert SkillEvent.objects.filter(kind="expired", proposal=proposal).exists()


def test_beat_runs_the_expiry_hourly():
    assert ("expire-skill-proposals", EXPIRE_TASK, 3600) in periodic_tasks()
    assert expire_proposals.name == EXPIRE_TASK


def test_a_group_chat_is_told_of_many_proposals_in_one_notice(skill, group_author, settings):
    for n in range(3):
        created = skill_create(name=f"s-{n}", content=skill_md(name=f"s-{n}"), author=group_author)
        aged(created.proposal, 15)
    assert expire_proposals() == 3
    [notice] = notices(group_author.chat)
    assert notice.text.startswith("3 skill changes proposed here expired")
    assert all(f"create of s-{n}" in notice.text for n in range(3))
    chat, _ = chat_get_or_create(channel="telegram", chat_id="-1001", kind=ChatKind.GROUP)
    assert chat == group_author.chat
