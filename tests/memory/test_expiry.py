"""Memory proposals expire on a schedule too: beat's periodic task applies memory's own rule
(`proposal_expires_at`, MEMORY_PROPOSAL_TTL_DAYS) without waiting for someone to open a page,
audits each, and tells the chat each came from, without a word of what was proposed (a fact
about Bob is never shown to the group); decided entries are untouched, a second run is a
no-op."""

from datetime import timedelta

import pytest
from django.utils import timezone

from bots.models import OutboundMessage
from chats.models import ChatKind, Message
from chats.services import actor_get_or_create, chat_get_or_create
from hermes_site.celery import periodic_tasks
from memory.models import MemoryEntry, MemoryEvent
from memory.reviews import memory_review
from memory.services import Author, memory_book, memory_propose
from memory.tasks import EXPIRE_TASK, expire_proposals
from tests.memory.helpers import shown_revision

pytestmark = [pytest.mark.storage, pytest.mark.django_db]

Status = MemoryEntry.Status


@pytest.fixture(autouse=True)
def telegram(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.MEMORY_PROPOSAL_TTL_DAYS = 14


@pytest.fixture
def group():
    chat, _ = chat_get_or_create(
        channel="telegram", chat_id="-1001", kind=ChatKind.GROUP, title="Ops"
    )
    return chat


@pytest.fixture
def bob(make_person):
    return make_person("bob", first_name="Bob")


def propose(book, text, *, chat, person, change="add", match=""):
    actor = actor_get_or_create(
        channel=chat.channel, user_id=f"u{person.pk}", display_name=person.username, person=person
    )
    outcome = memory_propose(
        book=book,
        change=change,
        author=Author(actor=actor, person=person, chat=chat),
        content=text,
        match=match,
    )
    assert outcome.code == "pending", outcome.message
    return MemoryEntry.objects.get(pk=outcome.entry.pk)


def past_due(entry):
    MemoryEntry.objects.filter(pk=entry.pk).update(
        proposal_expires_at=timezone.now() - timedelta(minutes=1)
    )


def notices(chat):
    return list(Message.objects.filter(chat=chat, metadata__notice="memory-expiry"))


def test_due_proposals_expire_on_schedule_and_the_chat_hears_no_fact(group, bob, owner, member):
    about_bob = memory_book(scope="user", person=bob)
    secret = propose(about_bob, "Bob is interviewing at Initech.", chat=group, person=owner)
    fresh = propose(about_bob, "Bob drinks tea.", chat=group, person=owner)
    team = memory_book(scope="team")
    held = propose(team, "Deploys on Tuesdays.", chat=group, person=owner)
    owner.is_staff = True  # a team reviewer
    owner.save()
    memory_review(
        entry_id=held.pk, revision=shown_revision(held.pk), decision="approve", person=owner
    )
    change = propose(
        team, "Deploys on Thursdays.", chat=group, person=member, change="replace", match="Tues"
    )
    rejected = propose(team, "The VPN is Ruby.", chat=group, person=member)
    memory_review(
        entry_id=rejected.pk, revision=shown_revision(rejected.pk), decision="reject", person=owner
    )
    for entry in (secret, change, rejected):
        past_due(entry)

    assert expire_proposals() == 2
    secret.refresh_from_db()
    assert (secret.status, secret.pending_change) == (Status.EXPIRED, "")
    change.refresh_from_db()  # a replacement left to expire: the approved text stays
    assert (change.status, change.text, change.pending_change) == (
        Status.ACTIVE,
        "Deploys on Tuesdays.",
        "",
    )
    assert MemoryEntry.objects.get(pk=fresh.pk).status == Status.PENDING
    assert MemoryEntry.objects.get(pk=rejected.pk).status == Status.REJECTED
    expired = MemoryEvent.objects.filter(kind=MemoryEvent.Kind.EXPIRED)
    assert {(e.entry_id, e.via) for e in expired} == {(secret.pk, "system"), (change.pk, "system")}

    [notice] = notices(group)
    assert notice.role == Message.Role.SYSTEM
    assert notice.text.startswith("2 memory proposals made in this chat expired")
    assert "14 days" in notice.text and "nothing was changed" in notice.text
    [sent] = OutboundMessage.objects.filter(kind="send", telegram_chat_id=-1001)
    for shown in (notice.text, sent.payload["text"]):
        # The audience rule: nothing of what was proposed, nor about whom.
        assert "Initech" not in shown and "Thursdays" not in shown and "Bob" not in shown
        assert "bob" not in shown.lower()

    assert expire_proposals() == 0  # idempotent
    assert expired.count() == 2 and len(notices(group)) == 1
    assert OutboundMessage.objects.filter(telegram_chat_id=-1001).count() == 1


def test_the_approvals_page_expiring_lazily_tells_the_chat_too(group, bob, owner):
    from tests.chats.dashboard_helpers import login

    entry = propose(
        memory_book(scope="user", person=bob), "Bob likes jazz.", chat=group, person=owner
    )
    past_due(entry)
    assert "Bob likes jazz." not in login(bob).get("/memory/approvals/").text
    [notice] = notices(group)
    assert notice.text.startswith("A memory proposal made in this chat expired")
    assert "jazz" not in notice.text


def test_beat_runs_the_expiry_hourly():
    assert ("expire-memory-proposals", EXPIRE_TASK, 3600) in periodic_tasks()
    assert expire_proposals.name == EXPIRE_TASK
