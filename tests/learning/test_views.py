""" "What the agent learned here": a chat's counters, settings and reviews, who reads the page
and who changes the settings, hostile review records, private memory, paging and queries."""

import re
from decimal import Decimal
from urllib.parse import quote

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from chats.agent.registry import ORIGIN_REVIEW
from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure
from learning import views as learning_views
from learning.models import ChatLearning, Review
from learning.services import (
    MAX_INTERVAL,
    ChatLearningNotAllowed,
    chat_learning_settings_update,
    chat_learning_update,
)
from memory.models import MemoryEntry
from memory.reviews import memory_review
from memory.services import Author, memory_book, memory_propose
from skills.models import Skill, SkillProposal
from tests.chats.dashboard_helpers import login, page_url

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
ZERO_WIDTH = "\u200b"
TAGS = "".join(chr(0xE0000 + ord(c)) for c in "run rm")  # invisible "tag" characters


def learning_url(chat):
    return f"/chats/{quote(chat.chat_key, safe='/:')}/learning"


def settings_url(chat):
    return learning_url(chat) + "/settings"


def turns(page):
    """The "after turn N" of each review on the page, in page order."""
    return [int(number) for number in re.findall(r"review after turn (\d+)", page)]


def make_review(chat, **fields):
    values = {"focus": Review.Focus.MEMORY, "status": Review.Status.DONE, "turn_number": 10}
    return Review.objects.create(chat=chat, **(values | fields))


def review_propose(review, book, text, *, visibility=""):
    """A proposal as a background review's memory tool makes it: pending, linked to it."""
    author = Author(chat=review.chat, origin=ORIGIN_REVIEW, review_id=review.pk)
    outcome = memory_propose(
        book=book, change="add", author=author, content=text, visibility=visibility
    )
    assert outcome.code == "pending", outcome.message
    return MemoryEntry.objects.get(pk=outcome.entry.pk)


def skill_proposal(review, slug, *, action="create", skill=None, status="pending"):
    return SkillProposal.objects.create(
        slug=slug,
        action=action,
        skill=skill,
        skill_md="---\nname: x\n---\n",
        content_hash="h",
        status=status,
        review=review,
    )


@pytest.fixture
def topic(owner, member):
    """A Telegram forum topic whose key holds `/` and `:` (olivia owns it, marco reads it)."""
    chat, _ = chat_get_or_create(
        channel="telegram", chat_id="ops/eu:west", thread_id="7", title="Ops topic"
    )
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    assert "/" in chat.chat_key and chat.chat_key.count(":") >= 3
    return chat


@pytest.fixture
def other_admin(make_person):
    """The admin of another room, who is not in the topic."""
    chat, _ = chat_get_or_create(channel="web", chat_id="elsewhere", title="Elsewhere")
    admin = make_person("adele")
    chat_member_ensure(chat=chat, person=admin, role=ChatMember.Role.ADMIN)
    return admin


# --- the page: who reads it ----------------------------------------------------------------


def test_a_reader_sees_counters_and_settings_and_no_form(member, topic, settings):
    settings.LEARNING_MEMORY_REVIEW_INTERVAL = 10
    settings.LEARNING_SKILL_REVIEW_INTERVAL = 10
    ChatLearning.objects.create(
        chat=topic, user_turns_since_memory_review=4, iterations_since_skill_review=3
    )
    chat_learning_update(chat=topic, memory_interval=None, skill_interval=0, review_notice=True)

    response = login(member).get(learning_url(topic))
    page = response.content.decode()
    assert response.status_code == 200
    assert "What the agent learned here" in page
    assert "4 of 10 user turns until the next memory review" in page
    assert '<dd id="skill-counter">off</dd>' in page  # interval 0: no skill reviews here
    assert "site default (10)" in page and "off (this chat)" in page
    assert '<dd id="review-notice">on' in page
    assert f'href="{page_url(topic)}"' in page  # back to the chat
    assert 'id="settings-form"' not in page and "Change these settings" not in page
    assert 'id="nothing-learned"' in page and "Nothing learned yet." in page
    assert 'rel="stylesheet" href="/static/css/learning' in page


def test_the_chat_page_links_to_the_learning_page(member, topic):
    page = login(member).get(page_url(topic)).content.decode()
    assert f'href="{learning_url(topic)}"' in page and "What the agent learned here" in page


def test_before_the_first_turn_the_counters_start_at_zero(owner, topic):
    page = login(owner).get(learning_url(topic)).content.decode()
    assert "0 of 10 user turns until the next memory review" in page
    assert "0 of 10 tool-loop iterations until the next skill review" in page
    assert not ChatLearning.objects.exists()  # reading creates nothing


def test_outsiders_other_chats_admins_and_missing_chats_get_the_same_404(
    outsider, topic, other_admin
):
    make_review(topic, outcome="Saved a secret plan.")
    missing = login(outsider).get("/chats/telegram:nope:topic:7/learning")
    assert missing.status_code == 404
    for person in (outsider, other_admin):
        response = login(person).get(learning_url(topic))
        assert response.status_code == 404
        assert response.content == missing.content
        assert "secret plan" not in response.content.decode()


def test_anonymous_and_deactivated_people_are_sent_to_log_in(member, topic):
    make_review(topic, outcome="Saved a secret plan.")
    anonymous = Client().get(learning_url(topic))
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    client = login(member)
    member.is_active = False
    member.save(update_fields=["is_active"])
    response = client.get(learning_url(topic))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert "secret plan" not in response.content.decode()


def test_the_learning_url_never_shadows_a_chat_whose_key_ends_in_learning(owner):
    chat, _ = chat_get_or_create(channel="web", chat_id="notes/learning", title="Learning notes")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    client = login(owner)
    assert "Learning notes" in client.get(page_url(chat)).content.decode()
    assert "What the agent learned here" in client.get(learning_url(chat)).content.decode()


# --- the reviews ---------------------------------------------------------------------------


def test_each_review_shows_when_focus_status_model_tokens_cost_duration_and_outcome(member, topic):
    make_review(
        topic,
        turn_number=12,
        focus=Review.Focus.COMBINED,
        model="review-model-x",
        prompt_tokens=1234,
        completion_tokens=56,
        cost=Decimal("0.004321"),
        duration_ms=2500,
        outcome="Nothing to save.",
        tool_calls=2,
        refused_calls=1,
        steps=[
            {
                "tool": "skill_view",
                "arguments": {"name": "standup"},
                "result": "Standup at nine.",
                "is_error": False,
                "refused": False,
            },
            {
                "tool": "terminal",
                "arguments": {"command": "ls"},
                "result": "Error: a review may call only memory; 'terminal' was refused",
                "is_error": True,
                "refused": True,
            },
        ],
    )
    make_review(
        topic, turn_number=20, status=Review.Status.FAILED, error="The model is unreachable."
    )
    make_review(topic, turn_number=30, status=Review.Status.QUEUED)
    page = login(member).get(learning_url(topic)).content.decode()

    assert turns(page) == [30, 20, 12]
    assert "<strong>Memory and skills</strong> review after turn 12" in page
    assert "review-model-x" in page and "1234 tokens in / 56 out" in page
    assert "cost 0.004321" in page and "took 2.5 s" in page
    assert "Nothing to save." in page and "2 tool calls, 1 refused" in page
    assert "Failed: The model is unreachable." in page
    assert '<span class="label label-queued">queued</span>' in page
    assert "<summary>Tool calls (2)</summary>" in page  # collapsed
    assert "&quot;name&quot;: &quot;standup&quot;" in page  # a read of skills: all shown
    assert "Standup at nine." in page
    assert '<li class="step is-refused">' in page and "label-refused" in page
    # A refused call proposed nothing: its tool is named, its arguments are not shown.
    assert "&quot;command&quot;" not in page and "the call was refused" in page


def test_hostile_outcomes_and_tool_arguments_are_escaped_with_hidden_characters_marked(
    member, topic
):
    hostile = f"<script>alert(1)</script> ok{ZERO_WIDTH}{TAGS}"
    make_review(
        topic,
        outcome=hostile,
        error="",
        steps=[
            {
                "tool": "skill_view",
                "arguments": {"content": hostile},
                "result": hostile,
                "is_error": False,
                "refused": False,
            },
            {"tool": "skills_list", "arguments": hostile, "result": "", "refused": False},
            {"tool": "memory<img src=x>", "arguments": hostile, "result": "", "refused": True},
        ],
    )
    page = login(member).get(learning_url(topic)).content.decode()
    assert "<script>alert(1)" not in page and "<img src=x>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; ok⟦U+200B⟧⟦tags: &quot;run rm&quot;⟧" in page
    assert ZERO_WIDTH not in page and TAGS not in page
    assert page.count("⟦U+200B⟧") == 4  # outcome, JSON arguments, result, raw arguments


def test_thirty_reviews_page_by_twenty_five_with_constant_queries(
    owner, topic, django_assert_num_queries
):
    client = login(owner)

    def fill(count, start):
        for number in range(start, start + count):
            review = make_review(topic, turn_number=number, outcome=f"Outcome {number}.")
            entry = review_propose(
                review, memory_book(scope="chat", chat=topic), f"Fact number {number}."
            )
            proposal = skill_proposal(review, f"skill-{number}")
            step = {"tool": "memory", "arguments": {"content": f"Fact number {number}."}}
            review.steps = [
                step | {"memory_entries": [entry.pk], "skill_proposals": []},
                step | {"tool": "skill_manage", "skill_proposals": [proposal.pk]},
            ]
            review.save(update_fields=["steps"])

    fill(3, 1)
    with CaptureQueriesContext(connection) as few:
        client.get(learning_url(topic))
    fill(27, 4)
    with django_assert_num_queries(len(few)):
        page = client.get(learning_url(topic)).content.decode()
    assert turns(page) == list(range(30, 5, -1))  # the newest 25
    assert "Fact number 30." in page  # olivia owns the chat: its pending facts are hers to decide
    assert "&quot;content&quot;: &quot;Fact number 30." in page  # and so the steps that made them
    assert "Page 1 of 2" in page and 'href="?page=2"' in page

    second = client.get(learning_url(topic) + "?page=2", headers=HTMX | {"HX-Target": "reviews"})
    fragment = second.content.decode()
    assert second.status_code == 200 and fragment.lstrip().startswith('<div id="reviews">')
    assert turns(fragment) == [5, 4, 3, 2, 1]
    assert "<html" not in fragment and "Next memory review" not in fragment
    assert "HX-Request" in second["Vary"]
    assert client.get(learning_url(topic) + "?page=x").status_code == 200


# --- what reviews proposed, through memory's rules -------------------------------------------


@pytest.fixture
def group(make_person):
    """A Telegram group of Alice and Bob (members) owned by Olga."""
    alice, bob, olga = make_person("alice"), make_person("bob"), make_person("olga")
    bob.first_name, bob.last_name = "Bob", "Builder"
    bob.save()
    chat, _ = chat_get_or_create(channel="telegram", chat_id="-100", kind="group", title="Crew")
    chat_member_ensure(chat=chat, person=olga, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=alice)
    chat_member_ensure(chat=chat, person=bob)
    return chat, alice, bob, olga


def test_a_pending_fact_about_bob_is_bobs_to_read_and_decide_not_alices(group):
    chat, alice, bob, olga = group
    review = make_review(chat)
    entry = review_propose(
        review, memory_book(scope="user", person=bob), "Uses vim only.", visibility="shared"
    )

    for person in (alice, olga):
        page = login(person).get(learning_url(chat)).content.decode()
        assert f'id="proposed-memory-{entry.pk}"' in page
        assert "About Bob Builder" in page and "proposed" in page
        assert "Uses vim only." not in page and "(text not shown here)" in page
        assert "waiting for Bob Builder" in page and "Waiting for your decision" not in page

    page = login(bob).get(learning_url(chat)).content.decode()
    assert "Uses vim only." in page
    assert 'href="/memory/approvals/" class="waiting-for-you">Waiting for your decision' in page

    memory_review(entry_id=entry.pk, decision="approve", revision=entry.revision, person=bob)
    page = login(alice).get(learning_url(chat)).content.decode()
    # Approved and shared: the group's readers see it (it reaches this group's prompts too).
    assert "Uses vim only." in page and "label-approved" in page and 'class="waiting' not in page


def test_an_approved_private_fact_stays_out_of_the_group_page_but_not_its_subjects(group):
    chat, alice, bob, olga = group
    review = make_review(chat)
    entry = review_propose(
        review, memory_book(scope="user", person=bob), "Sees a therapist.", visibility="private"
    )
    memory_review(entry_id=entry.pk, decision="approve", revision=entry.revision, person=bob)
    assert "Sees a therapist." not in login(alice).get(learning_url(chat)).content.decode()
    assert "Sees a therapist." in login(bob).get(learning_url(chat)).content.decode()


def test_chat_and_team_facts_are_shown_to_who_decides_them(group, make_person):
    chat, alice, bob, olga = group
    staff = make_person("stella", is_staff=True)
    chat_member_ensure(chat=chat, person=staff)
    review = make_review(chat)
    review_propose(review, memory_book(scope="chat", chat=chat), "The crew ships on Fridays.")
    review_propose(review, memory_book(scope="team"), "The VPN is called Ruby.")

    def shown(person):
        page = login(person).get(learning_url(chat)).content.decode()
        return {text for text in ("ships on Fridays", "called Ruby") if text in page}

    assert shown(alice) == set()
    assert shown(olga) == {"ships on Fridays"}  # the group's owner decides its chat facts
    assert shown(staff) == {"ships on Fridays", "called Ruby"}
    assert "waiting for a reviewer" in login(alice).get(learning_url(chat)).content.decode()


def test_rejected_and_expired_proposals_show_their_status_and_no_text(group):
    chat, alice, bob, olga = group
    review = make_review(chat)
    rejected = review_propose(review, memory_book(scope="chat", chat=chat), "Deploys at noon.")
    memory_review(entry_id=rejected.pk, decision="reject", revision=rejected.revision, person=olga)
    expired = review_propose(review, memory_book(scope="chat", chat=chat), "Lunch at one.")
    MemoryEntry.objects.filter(pk=expired.pk).update(proposal_expires_at="2000-01-01T00:00Z")
    page = login(olga).get(learning_url(chat)).content.decode()
    assert "Deploys at noon." not in page and "Lunch at one." not in page
    assert '<span class="label label-rejected">rejected</span>' in page
    assert '<span class="label label-expired">expired undecided</span>' in page


def test_skill_proposals_show_action_name_status_and_link_only_existing_skills(owner, topic):
    review = make_review(topic, focus=Review.Focus.SKILLS)
    skill = Skill.objects.create(slug="flask-k8s-deploy")
    skill_proposal(review, "flask-k8s-deploy", action="patch", skill=skill)
    skill_proposal(review, "brand-new", status="rejected")
    page = login(owner).get(learning_url(topic)).content.decode()
    assert "Skill patch" in page and "Skill create" in page
    assert 'href="/skills/flask-k8s-deploy/" class="skill-link">flask-k8s-deploy</a>' in page
    assert "<code>brand-new</code>" in page and "rejected" in page
    assert "waiting for a reviewer" in page.lower()


def test_without_the_skill_pages_a_skill_is_named_without_a_link(settings):
    settings.ROOT_URLCONF = "learning.urls"
    assert learning_views._skill_url("flask-k8s-deploy") == ""


def test_a_skill_reviewer_is_pointed_to_the_approvals_page(make_person, topic):
    staff = make_person("stella", is_staff=True)
    chat_member_ensure(chat=topic, person=staff)
    skill_proposal(make_review(topic, focus=Review.Focus.SKILLS), "rota")
    page = login(staff).get(learning_url(topic)).content.decode()
    assert 'class="waiting-for-you">Waiting for your decision' in page


# --- the settings form ---------------------------------------------------------------------


def post_settings(client, chat, *, memory="", skill="", notice=False, htmx=False):
    data = {"memory_interval": memory, "skill_interval": skill}
    if notice:
        data["review_notice"] = "on"
    return client.post(settings_url(chat), data, headers=HTMX if htmx else {})


def test_an_owner_changes_the_settings_with_htmx_and_the_counters_are_kept(owner, topic):
    ChatLearning.objects.create(chat=topic, user_turns_since_memory_review=4)
    client = login(owner)
    assert 'id="settings-form"' in client.get(learning_url(topic)).content.decode()

    response = post_settings(client, topic, memory="5", skill="0", notice=True, htmx=True)
    fragment = response.content.decode()
    assert response.status_code == 200
    assert fragment.lstrip().startswith('<div id="learning-settings"')
    assert "Saved the learning settings." in fragment
    assert "4 of 5 user turns until the next memory review" in fragment
    assert '<dd id="skill-counter">off</dd>' in fragment
    learning = ChatLearning.objects.get(chat=topic)
    assert (learning.memory_interval, learning.skill_interval, learning.review_notice) == (
        5,
        0,
        True,
    )
    assert learning.user_turns_since_memory_review == 4
    log = LogEntry.objects.get()
    assert log.user == owner and log.object_id == str(learning.pk)
    assert "memory interval: site default → 5" in log.change_message
    assert "skill interval: site default → off" in log.change_message


def test_without_javascript_the_form_posts_and_redirects_back(make_person, topic):
    admin = make_person("ada")
    chat_member_ensure(chat=topic, person=admin, role=ChatMember.Role.ADMIN)
    client = login(admin)
    response = post_settings(client, topic, memory="", skill="6")
    assert response.status_code == 302 and response["Location"] == learning_url(topic)
    page = client.get(response["Location"]).content.decode()
    assert "Saved the learning settings." in page
    assert "every 6 tool-loop iterations (this chat)" in page and "site default (10)" in page
    assert ChatLearning.objects.get(chat=topic).skill_interval == 6


def test_active_staff_in_the_chat_may_change_it_too(make_person, topic):
    staff = make_person("stella", is_staff=True)
    chat_member_ensure(chat=topic, person=staff)
    response = post_settings(login(staff), topic, memory="7", htmx=True)
    assert response.status_code == 200
    assert ChatLearning.objects.get(chat=topic).memory_interval == 7


@pytest.mark.parametrize(
    ("memory", "error"),
    [
        ("-1", "Enter 0 or more"),
        ("ten", "Enter a whole number"),
        ("1.5", "Enter a whole number"),
        (str(10**30), f"Enter at most {MAX_INTERVAL:,}"),
        ("9" * 5000, "Enter a whole number"),
    ],
)
def test_bad_values_are_shown_next_to_the_field_and_nothing_changes(owner, topic, memory, error):
    chat_learning_update(chat=topic, memory_interval=4, skill_interval=None, review_notice=False)
    client = login(owner)
    response = post_settings(client, topic, memory=memory, skill="2", htmx=True)
    fragment = response.content.decode()
    assert response.status_code == 400
    assert 'id="id_memory_interval_error"' in fragment and error in fragment
    assert '<details class="learning-form" open>' in fragment
    response = post_settings(client, topic, memory=memory, skill="2")  # without JavaScript
    assert response.status_code == 400 and error in response.content.decode()
    assert "What the agent learned here" in response.content.decode()
    learning = ChatLearning.objects.get(chat=topic)
    assert (learning.memory_interval, learning.skill_interval) == (4, None)
    assert not LogEntry.objects.exists()


def test_members_outsiders_and_other_chats_admins_change_nothing(
    member, outsider, topic, other_admin
):
    chat_learning_update(chat=topic, memory_interval=4, skill_interval=None, review_notice=False)
    assert post_settings(login(member), topic, memory="1", htmx=True).status_code == 403
    assert post_settings(login(member), topic, memory="1").status_code == 403
    assert post_settings(login(outsider), topic, memory="1").status_code == 404
    assert post_settings(login(other_admin), topic, memory="1").status_code == 404
    anonymous = post_settings(Client(), topic, memory="1")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert login(member).get(settings_url(topic)).status_code == 405
    assert ChatLearning.objects.get(chat=topic).memory_interval == 4
    assert not LogEntry.objects.exists()


def test_the_service_refuses_everyone_but_owners_admins_and_active_staff(
    owner, member, outsider, topic, make_person
):
    staff_elsewhere = make_person("stan", is_staff=True)  # staff, not in the chat
    for person in (member, outsider, AnonymousUser(), None):
        with pytest.raises(ChatLearningNotAllowed):
            chat_learning_settings_update(
                chat=topic, person=person, memory_interval=1, skill_interval=1, review_notice=True
            )
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    with pytest.raises(ChatLearningNotAllowed):
        chat_learning_settings_update(
            chat=topic, person=owner, memory_interval=1, skill_interval=1, review_notice=True
        )
    assert not ChatLearning.objects.exists()
    with pytest.raises(ValueError):
        chat_learning_settings_update(
            chat=topic,
            person=staff_elsewhere,
            memory_interval=MAX_INTERVAL + 1,
            skill_interval=None,
            review_notice=False,
        )
    learning = chat_learning_settings_update(
        chat=topic,
        person=staff_elsewhere,
        memory_interval=2,
        skill_interval=None,
        review_notice=False,
    )
    assert learning.memory_interval == 2 and LogEntry.objects.get().user == staff_elsewhere
