"""Who reviews skills: the per-person rule and its query form agree."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from chats.services import actor_get_or_create
from skills.policy import may_review, reviewers_filter, skill_reviewer_actors

pytestmark = pytest.mark.django_db


def test_the_query_finds_exactly_the_people_may_review_accepts(make_person, settings):
    reviewers = Group.objects.create(name=settings.SKILLS_REVIEWERS_GROUP)
    others = Group.objects.create(name="memory reviewers")
    people = [
        make_person("staff", is_staff=True),
        make_person("root", is_superuser=True),
        make_person("greta"),
        make_person("gone", is_staff=True, is_active=False),
        make_person("plain"),
        make_person("mo"),
    ]
    people[2].groups.add(reviewers)
    people[5].groups.add(others)
    found = set(get_user_model().objects.filter(reviewers_filter()))
    assert found == {person for person in people if may_review(person)}
    assert {person.username for person in found} == {"staff", "root", "greta"}
    for person in people:
        actor_get_or_create(
            channel="telegram", user_id=person.pk, display_name=person.username, person=person
        )
    linked = skill_reviewer_actors(channel="telegram")
    assert [actor.person.username for actor in linked] == ["staff", "root", "greta"]
    assert skill_reviewer_actors(channel="web") == []


def test_a_group_members_answer_is_read_once_per_person_object(
    make_person, settings, django_assert_num_queries
):
    greta = make_person("greta")
    settings.SKILLS_REVIEWERS_GROUP = "skill reviewers"
    greta.groups.add(Group.objects.create(name="skill reviewers"))
    with django_assert_num_queries(1):
        assert may_review(greta) and may_review(greta) and may_review(greta)
    settings.SKILLS_REVIEWERS_GROUP = "another group"
    with django_assert_num_queries(1):
        assert not may_review(greta)
    settings.SKILLS_REVIEWERS_GROUP = "skill reviewers"
    greta.groups.clear()
    fresh = get_user_model().objects.get(pk=greta.pk)  # the next request's object
    with django_assert_num_queries(1):
        assert not may_review(fresh)
