"""Who reviews skills, and which chat is its author's own private chat.

A chat is the author's own private chat when they are its one reader: their Telegram DM,
their terminal profile, an API conversation no one else is a member of. An API conversation
of an integration token is never one: the token's owner is a member and reads it (its
users are the integration's, not that person), so the agent's changes there wait for a skill
reviewer, as in every group, topic and web room. Where a change lands (team or personal,
applied or proposed) is decided by `skills.scope`, from these two answers.
"""

from django.conf import settings
from django.db.models import Q

from chats.models import Actor

APPROVAL_CHOICES = ("own_chat", "review", "auto")


def approval_policy() -> str:
    """The configured policy (validated at startup by a system check)."""
    return settings.SKILLS_APPROVAL


def reviewers_filter(prefix: str = "") -> Q:
    """The `may_review` rule as a query on people; `prefix` reaches them from another model
    ("person__" from an Actor)."""
    entitled = Q(**{f"{prefix}is_staff": True}) | Q(**{f"{prefix}is_superuser": True})
    group = settings.SKILLS_REVIEWERS_GROUP
    if group:
        entitled |= Q(**{f"{prefix}groups__name": group})
    return entitled & Q(**{f"{prefix}is_active": True})


def skill_reviewer_actors(*, channel: str) -> list[Actor]:
    """Accounts on `channel` linked to a skill reviewer (who get review messages there)."""
    actors = Actor.objects.filter(reviewers_filter("person__"), channel=channel, namespace="")
    return list(actors.select_related("person").distinct().order_by("id"))


def may_review(person) -> bool:
    """May this person decide skill proposals, roll back, pin, archive or restore skills?
    Active staff, superusers, and active members of SKILLS_REVIEWERS_GROUP."""
    if person is None or not getattr(person, "is_authenticated", False) or not person.is_active:
        return False
    if person.is_staff or person.is_superuser:
        return True
    group = settings.SKILLS_REVIEWERS_GROUP
    if not group:
        return False
    # A page asks several times (its context, the audit rows, the badge): the person object
    # lives for one request, so its membership is read once per request, not per question.
    known = getattr(person, "_skill_reviewers_group", None)
    if known is not None and known[0] == group:
        return known[1]
    member = person.groups.filter(name=group).exists()
    person._skill_reviewers_group = (group, member)
    return member
