"""The registries other apps plug into: approval sections and slash commands."""

import pytest

from chats.approvals import approval_sections, approvals_pending_count
from chats.slash_commands import (
    CommandContext,
    SlashCommand,
    register_slash_command,
    slash_command,
    slash_commands,
)


def test_memory_and_skills_register_their_approval_sections_in_page_order():
    names = [section.name for section in approval_sections()]
    assert names.index("memory") < names.index("skills")


@pytest.mark.django_db
def test_the_badge_counts_nothing_for_anonymous_people_and_outsiders(outsider):
    from django.contrib.auth.models import AnonymousUser

    assert approvals_pending_count(None) == 0
    assert approvals_pending_count(AnonymousUser()) == 0
    assert approvals_pending_count(outsider) == 0


@pytest.mark.django_db
def test_the_skills_command_lists_active_skills_and_filters_by_a_word(dm_author_factory):
    command = slash_command("skills")
    assert command is not None and command in slash_commands()
    context = CommandContext(channel="cli", chat=None, actor=None, person=None)
    assert command.handler(context) == "I know no skills yet."
    dm_author_factory()
    text = command.handler(context)
    assert text.startswith("Skills I know (1):\n• deploy-staging: How to deploy to staging.")
    miss = command.handler(
        CommandContext(channel="cli", chat=None, actor=None, person=None, args="zzz")
    )
    assert miss == "No skill matches “zzz”."


@pytest.fixture
def dm_author_factory(member):
    from chats.models import ChatKind
    from chats.services import actor_get_or_create, chat_get_or_create
    from skills.services import Author, skill_create
    from tests.skills.conftest import make_team
    from tests.skills.helpers import skill_md

    def make():
        chat, _ = chat_get_or_create(channel="telegram", chat_id="501", kind=ChatKind.DM)
        actor = actor_get_or_create(
            channel="telegram", user_id="501", display_name="Marco", person=member
        )
        author = Author(actor=actor, person=member, chat=chat)
        outcome = skill_create(name="deploy-staging", content=skill_md(), author=author)
        make_team(outcome.skill)  # made in Marco's DM it is his; listed in any chat as a team one
        return outcome

    return make


@pytest.mark.parametrize("name", ["", "Skills", "skills-list", "a" * 33, "sk ills", "/skills"])
def test_a_slash_command_name_telegram_would_refuse_is_refused_at_registration(name):
    with pytest.raises(ValueError, match="name"):
        register_slash_command(SlashCommand(name=name, help="x", handler=lambda context: ""))
    assert slash_command(name) is None


def test_a_slash_command_without_help_is_refused_at_registration():
    with pytest.raises(ValueError, match="help"):
        register_slash_command(SlashCommand(name="fine", help=" ", handler=lambda context: ""))
    assert slash_command("fine") is None
