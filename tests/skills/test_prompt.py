"""The skills index of the system prompt: lines cut to what and when, pinned first, within
its budget."""

import pytest

from chats.agent.context import build_context
from chats.agent.llm.base import ProviderInfo
from chats.agent.registry import TurnContext
from chats.agent.tokens import count_tokens
from chats.models import ChatKind, ChatMember
from chats.services import (
    actor_get_or_create,
    actor_link,
    chat_get_or_create,
    chat_member_ensure,
    message_ingest,
)
from skills.index import DESCRIPTION_CHARS
from skills.models import Skill, SkillVersion
from skills.prompt import skills_section
from skills.reviews import skill_set_status
from skills.selectors import IndexRow, skills_index_rows, skills_maybe_indexed
from skills.services import Author, skill_create, skill_delete
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db


def add(slug, *, category="", description="Does a thing.", status="active", pinned=False):
    skill = Skill.objects.create(
        slug=slug, category=category, description=description, status=status, pinned=pinned
    )
    skill.current_version = SkillVersion.objects.create(
        skill=skill, number=1, change="create", skill_md="x", content_hash="h"
    )
    skill.save()
    return skill


def test_no_skills_no_section():
    assert skills_section.render(None) == ""


def test_active_skills_listed_pinned_first_archived_never():
    add("zeta", pinned=True)
    add("alpha", category="ops", description="Line one.\nLine two " + "long " * 80)
    add("gone", status="archived")
    text = skills_section.render(None)
    lines = text.splitlines()
    assert lines[0] == "## Skills"
    assert lines[2] == "- zeta: Does a thing."
    assert lines[3].startswith("- alpha [ops]: Line one. Line two long") and lines[3].endswith("…")
    assert len(lines[3]) <= len("- alpha [ops]: ") + DESCRIPTION_CHARS
    assert "gone" not in text


def test_five_hundred_skills_stay_within_the_budget_and_say_how_to_list_the_rest(
    monkeypatch, settings
):
    from skills import prompt

    rows = [
        IndexRow(f"skill-{n:03d}", f"cat-{n % 7}", f"Procedure number {n} for the team.", False)
        for n in range(500)
    ]
    monkeypatch.setattr(prompt, "skills_index_rows", lambda **audience: rows)
    monkeypatch.setattr(prompt, "skills_maybe_indexed", lambda context: True)  # rows not stored
    for budget in (100, 400, 1200, 3000):
        settings.SKILLS_INDEX_TOKENS = budget
        text = skills_section.render(None)
        assert count_tokens(text) <= budget
        shown = sum(1 for line in text.splitlines() if line.startswith("- skill-"))
        assert 0 <= shown < 500
        assert f"- … and {500 - shown} more: call skills_list" in text
    monkeypatch.setattr(prompt, "skills_index_rows", lambda **audience: rows[:5])
    settings.SKILLS_INDEX_TOKENS = 1200
    everything = skills_section.render(None)
    assert "more: call skills_list" not in everything


def test_the_index_reads_only_short_columns():
    add("alpha")
    [row] = skills_index_rows()
    assert row == IndexRow("alpha", "", "Does a thing.", False)


# --- Through the context builder: the cheap "no skills here" answer is never stale ---------


def dm_author(user_id: str, *, person=None, name="Alice") -> Author:
    """Someone in their own Telegram DM (no other reader)."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id=user_id, kind=ChatKind.DM)
    actor = actor_get_or_create(
        channel="telegram", user_id=user_id, display_name=name, person=person
    )
    return Author(actor=actor, person=person, chat=chat)


def index_in_next_context(author: Author, text: str = "what now?") -> str:
    """The skills block of the system message of the next request in `author`'s chat."""
    trigger = message_ingest(
        channel="telegram",
        chat_id=author.chat.external_id,
        user_id=author.actor.external_id,
        user_name=author.actor.display_name,
        text=text,
    ).message
    context = TurnContext(
        chat=author.chat, trigger=trigger, actor=author.actor, person=author.person
    )
    built = build_context(
        chat=author.chat,
        trigger=trigger,
        provider_info=ProviderInfo(
            name="fake", model="fake", context_tokens=32_000, supports_tools=True
        ),
        tool_specs=[],
        turn_context=context,
        sections=[skills_section],
    )
    system = built.messages[0]["content"]
    return system[system.index("## Skills") :] if "## Skills" in system else ""


def test_a_team_skill_shows_from_its_creation_and_goes_with_its_archive(reviewer_author):
    assert index_in_next_context(reviewer_author) == ""
    assert not skills_maybe_indexed(None)
    created = skill_create(name="deploy-staging", content=skill_md(), author=reviewer_author)
    assert created.code == "applied", created.message
    assert "- deploy-staging: How to deploy to staging." in index_in_next_context(reviewer_author)

    skill_set_status(name="deploy-staging", archived=True, person=reviewer_author.person)
    assert index_in_next_context(reviewer_author) == ""
    skill_set_status(name="deploy-staging", archived=False, person=reviewer_author.person)
    assert "deploy-staging" in index_in_next_context(reviewer_author)

    deleted = skill_delete(name="deploy-staging", author=reviewer_author)
    assert deleted.code == "applied", deleted.message
    assert index_in_next_context(reviewer_author) == ""
    assert not skills_maybe_indexed(None)


def test_a_stale_skill_still_counts_and_one_without_a_version_does_not():
    skill = add("half-made")
    skill.current_version = None
    skill.save()
    assert not skills_maybe_indexed(None) and skills_section.render(None) == ""
    add("old-one", status="stale")
    assert skills_maybe_indexed(None) and "old-one" in skills_section.render(None)


def test_a_personal_skill_counts_only_for_its_owner(make_person):
    alice = make_person("alice")
    alices_dm = dm_author("7001", person=alice)
    bobs_dm = dm_author("7002", person=make_person("bob"), name="Bob")
    created = skill_create(name="alice-only", content=skill_md("alice-only"), author=alices_dm)
    assert (created.code, created.skill.scope) == ("applied", "personal"), created.message
    assert "alice-only" in index_in_next_context(alices_dm)
    assert index_in_next_context(bobs_dm) == ""
    bob_context = TurnContext(chat=bobs_dm.chat, trigger=None, actor=bobs_dm.actor)
    assert not skills_maybe_indexed(bob_context)


def test_an_accounts_personal_skill_follows_it_to_the_person_it_is_linked_to(make_person):
    unlinked = dm_author("9900", name="Nobody")
    created = skill_create(name="my-way", content=skill_md("my-way"), author=unlinked)
    assert created.skill.owner_actor == unlinked.actor, created.message
    assert "my-way" in index_in_next_context(unlinked)

    # The account is linked to a Person; in that Person's terminal (another actor) the skill
    # is theirs: found through the account's link, not by either actor.
    person = make_person("nora")
    actor_link(actor=unlinked.actor, person=person)
    chat, _ = chat_get_or_create(channel="cli", chat_id=f"profile-{person.pk}", kind=ChatKind.CLI)
    chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
    actor = actor_get_or_create(channel="cli", user_id=str(person.pk), person=person)
    terminal = TurnContext(chat=chat, trigger=None, actor=actor, person=person)
    assert skills_maybe_indexed(terminal)
    assert "my-way" in skills_section.render(terminal)
