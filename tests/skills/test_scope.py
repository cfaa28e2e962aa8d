"""Who may change what everyone reads (issue 19): personal skills, where they are shown,
where a change lands, the per-author limits, and promotion to the team."""

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from chats.agent.registry import TurnContext
from chats.models import ChatKind, ChatMember
from chats.services import actor_get_or_create, chat_get_or_create, chat_member_ensure
from skills.models import Scope, Skill, SkillEvent, SkillProposal, SkillVersion
from skills.prompt import skills_section
from skills.reviews import skill_promote
from skills.services import (
    Author,
    SkillInvalid,
    SkillNotAllowed,
    SkillStale,
    skill_create,
    skill_delete,
    skill_edit,
    skill_file_write,
    skill_patch,
)
from skills.tools import SKILL_MANAGE_TOOL, SKILL_VIEW_TOOL, SKILLS_LIST_TOOL
from tests.skills.conftest import HOSTILE
from tests.skills.helpers import skill_md

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

SECRET = "alice-only-runbook"


def md(name: str, description: str = "Alice's own way of doing it.") -> str:
    return skill_md(name=name, description=description)


@pytest.fixture
def alice(make_person):
    return make_person("alice")


@pytest.fixture
def bob(make_person):
    return make_person("bob")


def telegram_dm(person, user_id: str):
    """`person` in their own Telegram DM (no other reader)."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id=user_id, kind=ChatKind.DM)
    actor = actor_get_or_create(
        channel="telegram", user_id=user_id, display_name=person.username.title(), person=person
    )
    return Author(actor=actor, person=person, chat=chat)


def terminal(person):
    """`person`'s terminal profile (`manage.py chat --user`)."""
    chat, _ = chat_get_or_create(channel="cli", chat_id=f"profile-{person.pk}", kind=ChatKind.CLI)
    chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
    actor = actor_get_or_create(channel="cli", user_id=person.pk, person=person)
    return Author(actor=actor, person=person, chat=chat)


def in_chat(author: Author, chat) -> Author:
    return Author(actor=author.actor, person=author.person, chat=chat)


@pytest.fixture
def alice_dm(alice):
    return telegram_dm(alice, "7001")


@pytest.fixture
def bob_dm(bob):
    return telegram_dm(bob, "7002")


@pytest.fixture
def group_with_alice(alice_dm, bob_dm):
    """A Telegram group Alice and Bob are both in."""
    chat, _ = chat_get_or_create(channel="telegram", chat_id="-100777", kind=ChatKind.GROUP)
    return chat


@pytest.fixture
def room_with_alice(alice, bob):
    """A web room whose only other member is Bob."""
    chat, _ = chat_get_or_create(channel="web", chat_id="alice-room", title="Alice's room")
    chat_member_ensure(chat=chat, person=alice, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=bob)
    return chat


@pytest.fixture
def alices_skill(alice_dm):
    outcome = skill_create(name=SECRET, content=md(SECRET), author=alice_dm)
    assert outcome.code == "applied", outcome.message
    return outcome.skill


def index_for(author: Author) -> str:
    context = TurnContext(chat=author.chat, trigger=None, actor=author.actor, person=author.person)
    return skills_section.render(context)


def call(tool, author: Author, **arguments) -> str:
    context = TurnContext(chat=author.chat, trigger=None, actor=author.actor, person=author.person)
    return tool.handler(context, arguments)


# --- Where a change lands --------------------------------------------------------------------


def test_a_non_reviewers_create_in_their_own_dm_is_their_personal_skill_at_once(
    alice, alice_dm, alices_skill
):
    skill = Skill.objects.get(slug=SECRET)
    assert (skill.scope, skill.owner_person, skill.owner_actor) == (Scope.PERSONAL, alice, None)
    assert skill.current_version.number == 1
    message = call(SKILL_MANAGE_TOOL, alice_dm, action="create", name="x2", content=md("x2"))
    assert "personal skill" in message and "promote it to the team" in message


def test_an_unlinked_telegram_account_owns_its_personal_skill_as_an_actor():
    chat, _ = chat_get_or_create(channel="telegram", chat_id="9900", kind=ChatKind.DM)
    actor = actor_get_or_create(channel="telegram", user_id="9900", display_name="Nobody")
    author = Author(actor=actor, chat=chat)
    outcome = skill_create(name="unlinked", content=md("unlinked"), author=author)
    assert outcome.code == "applied"
    skill = outcome.skill
    assert (skill.scope, skill.owner_person, skill.owner_actor) == (Scope.PERSONAL, None, actor)
    assert "unlinked" in index_for(author)
    patched = skill_patch(
        name="unlinked", old_string="make image", new_string="make x", author=author
    )
    assert patched.code == "applied"


def test_the_owner_changes_a_personal_skill_at_once_in_their_own_chats_only(
    alices_skill, alice_dm, group_with_alice, alice
):
    patched = skill_patch(
        name=SECRET, old_string="make image", new_string="make x", author=alice_dm
    )
    assert patched.code == "applied" and patched.version.number == 2
    cli = terminal(alice)
    edited = skill_file_write(
        name=SECRET, file_path="references/notes.md", file_content="Notes.", author=cli
    )
    assert edited.code == "applied"
    in_group = in_chat(alice_dm, group_with_alice)
    for change in (
        lambda: skill_patch(name=SECRET, old_string="make x", new_string="y", author=in_group),
        lambda: skill_edit(name=SECRET, content=md(SECRET, "Changed."), author=in_group),
        lambda: skill_delete(name=SECRET, author=in_group),
    ):
        outcome = change()
        assert outcome.code == "not_found" and "no skill named" in outcome.message
    assert not SkillProposal.objects.exists()
    archived = skill_delete(name=SECRET, author=alice_dm)
    assert archived.code == "applied"
    assert Skill.objects.get(slug=SECRET).status == Skill.Status.ARCHIVED


def test_nobody_else_changes_or_even_sees_a_personal_skill_by_name(alices_skill, bob_dm):
    outcome = skill_patch(name=SECRET, old_string="make image", new_string="x", author=bob_dm)
    missing = skill_patch(name="never-was", old_string="a", new_string="b", author=bob_dm)
    assert outcome.code == missing.code == "not_found"
    assert outcome.message == missing.message.replace("never-was", SECRET)
    taken = skill_create(name=SECRET, content=md(SECRET), author=bob_dm)
    assert taken.code == "conflict" and "taken by a skill not shown here" in taken.message
    assert "version" not in taken.message and "personal" not in taken.message
    assert Skill.objects.get(slug=SECRET).current_version.number == 1
    assert not SkillProposal.objects.exists()


def test_a_non_reviewers_change_of_a_team_skill_is_a_proposal_even_in_their_own_dm(
    skill, dm_author
):
    outcome = skill_patch(
        name="deploy-staging", old_string="make image", new_string="make x", author=dm_author
    )
    assert outcome.code == "proposed"
    assert Skill.objects.get(slug="deploy-staging").current_version.number == 1
    for change in (
        skill_edit(name="deploy-staging", content=skill_md(description="New."), author=dm_author),
        skill_delete(name="deploy-staging", author=dm_author),
    ):
        assert change.code == "proposed"
    assert Skill.objects.get(slug="deploy-staging").status == Skill.Status.ACTIVE


def test_asking_for_a_team_skill_in_your_own_dm_is_a_proposal(dm_author):
    outcome = skill_create(name="for-all", content=md("for-all"), author=dm_author, scope="team")
    assert outcome.code == "proposed" and not Skill.objects.exists()


def test_a_create_in_a_shared_chat_is_a_team_proposal_and_personal_is_refused_there(
    group_author, team_chat, member
):
    outcome = skill_create(name="shared", content=md("shared"), author=group_author)
    assert outcome.code == "proposed" and not Skill.objects.exists()
    in_room = Author(person=member, chat=team_chat)
    refused = skill_create(name="mine", content=md("mine"), author=in_room, scope="personal")
    assert refused.code == "invalid" and "own private chat" in refused.message
    assert SkillProposal.objects.count() == 1


def test_a_skill_reviewer_in_their_own_dm_writes_the_team_at_once_or_personal_if_asked(
    staff_reviewer, make_person, settings
):
    stella = telegram_dm(staff_reviewer, "7100")
    team = skill_create(name="for-team", content=md("for-team"), author=stella)
    assert team.code == "applied" and team.skill.scope == Scope.TEAM
    patched = skill_patch(name="for-team", old_string="make image", new_string="x", author=stella)
    assert patched.code == "applied"
    mine = skill_create(name="stellas", content=md("stellas"), author=stella, scope="personal")
    assert mine.code == "applied" and mine.skill.owner_person == staff_reviewer
    greta = make_person("greta")
    greta.groups.add(Group.objects.create(name=settings.SKILLS_REVIEWERS_GROUP))
    assert (
        skill_create(
            name="gretas", content=md("gretas"), author=telegram_dm(greta, "7101")
        ).skill.scope
        == Scope.TEAM
    )


def test_auto_writes_the_team_at_once_and_review_makes_every_create_a_proposal(dm_author, settings):
    settings.SKILLS_APPROVAL = "auto"
    auto = skill_create(name="auto-one", content=md("auto-one"), author=dm_author)
    assert auto.code == "applied" and auto.skill.scope == Scope.TEAM
    refused = skill_create(name="p", content=md("p"), author=dm_author, scope="personal")
    assert refused.code == "invalid" and "SKILLS_APPROVAL=auto" in refused.message
    settings.SKILLS_APPROVAL = "review"
    review = skill_create(name="review-one", content=md("review-one"), author=dm_author)
    assert review.code == "proposed"


def test_a_background_review_in_the_owners_dm_only_proposes(alices_skill, alice_dm, staff_reviewer):
    review = Author(
        actor=alice_dm.actor, person=alice_dm.person, chat=alice_dm.chat, origin="review"
    )
    outcome = skill_patch(name=SECRET, old_string="make image", new_string="make x", author=review)
    assert outcome.code == "proposed"
    assert Skill.objects.get(slug=SECRET).current_version.number == 1
    # The reviewer deciding it is told it changes a personal skill, not the team's.
    page = login(staff_reviewer).get("/memory/approvals/").content.decode()
    assert "a personal skill (only its owner's private chats)" in page


# --- Where a personal skill is shown ---------------------------------------------------------


def test_alices_personal_skill_never_leaks_into_another_chats_index_list_or_view(
    alices_skill, alice, alice_dm, bob_dm, group_with_alice, room_with_alice, make_person
):
    in_group = in_chat(alice_dm, group_with_alice)
    in_room = Author(
        actor=actor_get_or_create(channel="web", user_id=alice.pk, person=alice),
        person=alice,
        chat=room_with_alice,
    )
    # Another integration's API conversation: its token owner reads it, and its user claims
    # Alice's Telegram id.
    carol = make_person("carol")
    api_chat, _ = chat_get_or_create(channel="api", chat_id="conv-1", kind=ChatKind.API)
    chat_member_ensure(chat=api_chat, person=carol, role=ChatMember.Role.OWNER)
    api_user = actor_get_or_create(
        channel="api", user_id="7001", display_name="alice", namespace=f"owner:{carol.pk}"
    )
    in_api = Author(actor=api_user, chat=api_chat)
    for author in (bob_dm, in_group, in_room, in_api):
        assert SECRET not in index_for(author)
        assert SECRET not in call(SKILLS_LIST_TOOL, author)
        assert SECRET not in call(SKILLS_LIST_TOOL, author, query="alice")
        assert call(SKILL_VIEW_TOOL, author, name=SECRET).startswith("Error: there is no")
    for author in (alice_dm, terminal(alice)):
        assert f"- {SECRET}:" in index_for(author)
        assert f"{SECRET} (personal)" in call(SKILLS_LIST_TOOL, author)
        assert "personal: only in its owner's own private chats" in call(
            SKILL_VIEW_TOOL, author, name=SECRET
        )


def test_a_chat_with_a_second_member_is_not_private_any_more(alices_skill, alice, bob):
    cli = terminal(alice)
    assert SECRET in index_for(cli)
    chat_member_ensure(chat=cli.chat, person=bob)
    assert SECRET not in index_for(cli)


def test_slash_skills_lists_personal_skills_only_in_the_owners_own_chat(
    alices_skill, alice_dm, bob_dm
):
    from chats.slash_commands import CommandContext
    from skills.commands import skills_command

    def listed(author):
        return skills_command(
            CommandContext(
                channel="telegram", chat=author.chat, actor=author.actor, person=author.person
            )
        )

    assert f"{SECRET} (personal)" in listed(alice_dm)
    assert SECRET not in listed(bob_dm)


# --- Limits ---------------------------------------------------------------------------------


def test_the_personal_skills_limit_refuses_with_what_to_do(alice_dm, settings):
    settings.SKILLS_PERSONAL_MAX = 2
    for name in ("one", "two"):
        assert skill_create(name=name, content=md(name), author=alice_dm).code == "applied"
    refused = skill_create(name="three", content=md("three"), author=alice_dm)
    assert refused.code == "invalid"
    assert "you have 2 personal skills" in refused.message and "(2)" in refused.message
    assert "skill_manage(action='delete')" in refused.message
    assert not Skill.objects.filter(slug="three").exists()
    assert skill_delete(name="two", author=alice_dm).code == "applied"  # archived: frees one
    assert skill_create(name="three", content=md("three"), author=alice_dm).code == "applied"


def test_the_pending_proposals_limit_refuses_with_what_to_do(group_author, settings):
    settings.SKILLS_PENDING_MAX = 2
    for name in ("one", "two"):
        assert skill_create(name=name, content=md(name), author=group_author).code == "proposed"
    again = skill_create(name="two", content=md("two"), author=group_author)
    assert again.code == "proposed" and "Already proposed" in again.message
    refused = skill_create(name="three", content=md("three"), author=group_author)
    assert refused.code == "invalid"
    assert "2 skill changes you asked for already wait" in refused.message
    assert "wait until a reviewer decides" in refused.message
    assert SkillProposal.objects.count() == 2


# --- Promotion ------------------------------------------------------------------------------


def test_a_reviewer_promotes_a_personal_skill_and_everyone_gets_it(
    alices_skill, alice, alice_dm, bob_dm, staff_reviewer
):
    skill = skill_promote(name=SECRET, shown_version=1, person=staff_reviewer)
    assert (skill.scope, skill.owner_person, skill.owner_actor) == (Scope.TEAM, None, None)
    event = SkillEvent.objects.get(kind=SkillEvent.Kind.PROMOTE)
    assert event.person == staff_reviewer and event.detail == {"former_owner": "alice"}
    assert f"- {SECRET}:" in index_for(bob_dm) and f"- {SECRET}:" in index_for(alice_dm)
    assert "(personal)" not in call(SKILLS_LIST_TOOL, alice_dm)
    # Now a team skill: Alice's own change waits for a reviewer like anyone's.
    outcome = skill_patch(name=SECRET, old_string="make image", new_string="x", author=alice_dm)
    assert outcome.code == "proposed"


def test_only_a_skill_reviewer_promotes_and_only_the_version_shown(
    alices_skill, alice, alice_dm, outsider, member, team_chat, staff_reviewer, make_person
):
    other_group = make_person("otto")
    other_group.groups.add(Group.objects.create(name="memory reviewers"))
    for person in (alice, outsider, member, other_group, None):
        with pytest.raises(SkillNotAllowed):
            skill_promote(name=SECRET, shown_version=1, person=person)
    skill_patch(name=SECRET, old_string="make image", new_string="make x", author=alice_dm)
    with pytest.raises(SkillStale):
        skill_promote(name=SECRET, shown_version=1, person=staff_reviewer)
    assert Skill.objects.get(slug=SECRET).scope == Scope.PERSONAL
    assert not SkillEvent.objects.filter(kind=SkillEvent.Kind.PROMOTE).exists()


def test_a_promotion_is_scanned_again(alices_skill, staff_reviewer):
    hostile = skill_md(name=SECRET, body="# Steps\n\n" + HOSTILE + "\n")
    version = SkillVersion.objects.create(
        skill=alices_skill, number=2, change="edit", skill_md=hostile, content_hash="h2"
    )
    Skill.objects.filter(pk=alices_skill.pk).update(current_version=version)
    with pytest.raises(SkillInvalid):
        skill_promote(name=SECRET, shown_version=2, person=staff_reviewer)
    assert Skill.objects.get(slug=SECRET).scope == Scope.PERSONAL
    assert SkillEvent.objects.filter(kind=SkillEvent.Kind.BLOCKED).exists()


# --- The dashboard --------------------------------------------------------------------------


def login(person) -> Client:
    client = Client()
    client.force_login(person)
    return client


def test_only_the_owner_and_skill_reviewers_see_a_personal_skill_on_the_dashboard(
    alices_skill, alice, bob, outsider, staff_reviewer, group_reviewer, skill
):
    page = f"/skills/{SECRET}/"
    for person in (alice, staff_reviewer, group_reviewer):
        client = login(person)
        assert SECRET in client.get("/skills/").content.decode()
        shown = client.get(page)
        assert shown.status_code == 200
        assert "A personal skill of alice" in shown.content.decode()
        assert client.get(f"{page}raw").status_code == 200
    for person in (bob, outsider):
        client = login(person)
        library = client.get("/skills/").content.decode()
        assert SECRET not in library and "deploy-staging" in library
        for url in (page, f"{page}raw", f"{page}diff"):
            assert client.get(url).status_code == 404


def test_the_promote_button_is_for_reviewers_and_the_owner_then_sees_a_team_skill(
    alices_skill, alice, bob, staff_reviewer
):
    url = f"/skills/{SECRET}/promote"
    reviewer_page = login(staff_reviewer).get(f"/skills/{SECRET}/").content.decode()
    assert 'id="skill-promote"' in reviewer_page
    assert 'id="skill-promote"' not in login(alice).get(f"/skills/{SECRET}/").content.decode()
    assert login(alice).post(url, {"shown_version": 1}).status_code == 403
    assert login(bob).post(url, {"shown_version": 1}).status_code == 404
    assert login(staff_reviewer).post(url, {"shown_version": 9}).status_code == 409
    assert Skill.objects.get(slug=SECRET).scope == Scope.PERSONAL
    answer = login(staff_reviewer).post(url, {"shown_version": 1}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200 and "Promoted" in answer.content.decode()
    owner_page = login(alice).get(f"/skills/{SECRET}/").content.decode()
    assert 'id="skill-scope">team<' in owner_page and "A personal skill" not in owner_page
    assert login(bob).get(f"/skills/{SECRET}/").status_code == 200


def test_personal_skills_are_not_exported(alices_skill, skill, tmp_path):
    from django.core.management import call_command

    call_command("export_skills", str(tmp_path / "out"))
    assert (tmp_path / "out" / "deploy-staging" / "SKILL.md").exists()
    assert not (tmp_path / "out" / SECRET).exists()


def test_existing_skills_migrate_as_team_skills():
    from importlib import import_module

    migration = import_module("skills.migrations.0007_personal_scope").Migration
    [scope] = [op for op in migration.operations if getattr(op, "name", "") == "scope"]
    assert scope.field.default == "team"  # every row the migration finds becomes a team skill
    assert not any(type(op).__name__ == "RunPython" for op in migration.operations)
