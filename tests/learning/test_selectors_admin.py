"""Who may read reviews (chat readers only), the lookups proposals use to name their
review, and the admin: reviews read-only, each chat's intervals and notice editable."""

import pytest
from django.contrib.auth.models import AnonymousUser
from django.urls import reverse

from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from learning.models import ChatLearning, Review
from learning.selectors import (
    chat_learning_for_person,
    review_for_memory_entry,
    review_for_person,
    review_for_skill_proposal,
    review_origin_label,
    reviews_for_chat,
)
from memory.models import MemoryEntry
from memory.services import memory_book
from skills.models import SkillProposal

pytestmark = pytest.mark.django_db


@pytest.fixture
def review(team_chat):
    return Review.objects.create(
        chat=team_chat, focus=Review.Focus.MEMORY, turn_number=12, outcome="Nothing to save."
    )


def test_chat_readers_see_its_reviews_with_their_proposal_counts(review, team_chat, owner, member):
    entry = MemoryEntry.objects.create(
        book=memory_book(scope="chat", chat=team_chat),
        text="Standup at 9.",
        pending_change="add",
        review=review,
    )
    SkillProposal.objects.create(
        slug="standup", action="create", skill_md="x", content_hash="h", review=review
    )
    for person in (owner, member):
        (seen,) = reviews_for_chat(team_chat, person)
        assert seen == review
        assert seen.memory_proposal_count == 1 and seen.skill_proposal_count == 1
        assert review_for_person(person, review.pk) == review
        assert chat_learning_for_person(person, team_chat) is not None
    assert review_for_memory_entry(entry) == review
    assert review_origin_label(review_for_memory_entry(entry)) == (
        "proposed by the review after turn 12"
    )
    assert review_for_skill_proposal(SkillProposal.objects.get()) == review


def test_outsiders_anonymous_and_deactivated_people_see_no_review(
    review, team_chat, member, outsider
):
    member.is_active = False
    member.save()
    other, _ = chat_get_or_create(channel="web", chat_id="other-room")
    chat_member_ensure(chat=other, person=outsider, role=ChatMember.Role.OWNER)
    for person in (outsider, AnonymousUser(), member):
        assert list(reviews_for_chat(team_chat, person)) == []
        assert review_for_person(person, review.pk) is None
        assert chat_learning_for_person(person, team_chat) is None


def test_a_proposal_made_in_a_turn_names_no_review(team_chat):
    entry = MemoryEntry.objects.create(
        book=memory_book(scope="chat", chat=team_chat), text="Standup at 9.", pending_change="add"
    )
    assert review_for_memory_entry(entry) is None and review_origin_label(None) == ""


def test_the_review_admin_is_read_only(admin_client, review):
    listing = admin_client.get(reverse("admin:learning_review_changelist"))
    assert listing.status_code == 200 and "Nothing to save." not in listing.text
    page = admin_client.get(reverse("admin:learning_review_change", args=[review.pk]))
    assert page.status_code == 200 and "Nothing to save." in page.text
    assert 'name="_save"' not in page.text
    posted = admin_client.post(
        reverse("admin:learning_review_change", args=[review.pk]), {"outcome": "changed"}
    )
    assert posted.status_code == 403
    assert admin_client.get(reverse("admin:learning_review_add")).status_code == 403
    deleted = admin_client.post(
        reverse("admin:learning_review_delete", args=[review.pk]), {"post": "yes"}
    )
    assert deleted.status_code == 403
    assert Review.objects.get(pk=review.pk).outcome == "Nothing to save."


def test_staff_without_permission_and_members_cannot_open_the_learning_admin(
    client, member, make_person, review
):
    staff = make_person("sam", is_staff=True)
    client.force_login(staff)
    assert client.get(reverse("admin:learning_review_changelist")).status_code == 403
    client.force_login(member)
    response = client.get(reverse("admin:learning_review_changelist"))
    assert response.status_code == 302 and reverse("admin:login") in response["Location"]


def test_admin_edits_a_chats_intervals_and_notice_and_keeps_its_counters(admin_client, team_chat):
    learning = ChatLearning.objects.create(chat=team_chat, user_turns_since_memory_review=3)
    url = reverse("admin:learning_chatlearning_change", args=[learning.pk])
    assert admin_client.get(url).status_code == 200
    # A turn counted while the form was open: the save must not write the old count back.
    ChatLearning.objects.filter(pk=learning.pk).update(user_turns_since_memory_review=4)
    response = admin_client.post(
        url, {"memory_interval": "5", "skill_interval": "0", "review_notice": "on"}
    )
    assert response.status_code == 302
    learning.refresh_from_db()
    assert (learning.memory_interval, learning.skill_interval, learning.review_notice) == (
        5,
        0,
        True,
    )
    assert learning.user_turns_since_memory_review == 4
    assert admin_client.get(reverse("admin:learning_chatlearning_add")).status_code == 403
