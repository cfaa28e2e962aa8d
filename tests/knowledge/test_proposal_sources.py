"""Memory and skill proposals drawn from a knowledge passage carry its collection as their
source (issue 35): the passages `knowledge_search` returned in the turn and those the prompt
block offered. From a restricted collection such a proposal lands only in that chat's memory
(the chat's members all read the collection) or a private entry of the person who asked;
never team memory, a shared entry or a team skill. A collection everyone may read bounds
nothing. The approvals page names the collection to its readers only."""

import dataclasses
import json

import pytest

from chats.models import Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from chats.work_sources import work_sources
from knowledge.prompt import knowledge_section
from knowledge.services import collection_turn_on
from knowledge.tools import KNOWLEDGE_SEARCH
from knowledge.vectors import forget
from memory.models import MemoryEntry
from memory.tools import MEMORY_TOOL
from skills.models import Skill, SkillProposal
from skills.outcomes import SkillInvalid
from skills.reviews import skill_promote
from skills.tools import SKILL_MANAGE_TOOL
from tests.chats.dashboard_helpers import login
from tests.knowledge.helpers import runbooks, web_turn
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db

FACT = "When a disk is full, remove rotated logs under /var/log."


@pytest.fixture(autouse=True)
def _fresh_vector_cache():
    forget()
    yield
    forget()


def searched_turn(context, query="full disk"):
    """The turn of `context` called knowledge_search; its result stored as the engine does."""
    turn = Turn.objects.create(
        chat=context.chat, trigger=context.trigger, status=Turn.Status.RUNNING
    )
    result = KNOWLEDGE_SEARCH.handler(context, {"query": query})
    assert result["passages"], result
    Message.objects.create(
        chat=context.chat,
        role=Message.Role.TOOL,
        external_id=f"tool-{turn.pk}",
        text=json.dumps(result),
        metadata={"turn": turn.pk, "tool_call_id": "call-1", "tool_name": "knowledge_search"},
    )
    return dataclasses.replace(context, turn=turn)


def remember(context, scope, content=FACT, **extra):
    return MEMORY_TOOL.handler(
        context, {"action": "add", "scope": scope, "content": content, **extra}
    )


@pytest.fixture
def restricted(owner, member, team_chat):
    collection = runbooks(readers=[owner, member])
    collection_turn_on(collection=collection, chat=team_chat, by=owner)
    return collection


def test_a_search_in_the_turn_names_the_collection(restricted, team_chat, member):
    context = searched_turn(web_turn(team_chat, member))
    assert work_sources(context) == [
        {
            "kind": "collection",
            "id": restricted.pk,
            "name": "Runbooks",
            "chat_id": team_chat.pk,
            "how": "searched",
            "url": f"/knowledge/{restricted.pk}/",
            "everyone": False,
        }
    ]
    # Another turn in the same chat drew on nothing.
    assert work_sources(web_turn(team_chat, member, "hello")) == []


def test_the_prompt_blocks_passages_name_the_collection(restricted, team_chat, member):
    context = web_turn(team_chat, member)
    text = knowledge_section.render(context)
    assert text and text.details["passages"]
    turn = Turn.objects.create(
        chat=team_chat,
        trigger=context.trigger,
        status=Turn.Status.RUNNING,
        prompt_report={"sections": [{"name": "knowledge", "details": text.details}]},
    )
    context = dataclasses.replace(context, turn=turn)
    assert [(s["id"], s["how"]) for s in work_sources(context)] == [(restricted.pk, "offered")]


def test_team_memory_and_a_shared_entry_are_refused_chat_memory_is_kept(
    restricted, team_chat, member
):
    context = searched_turn(web_turn(team_chat, member))
    answer = remember(context, "team")
    assert answer.startswith(
        "Not stored: this draws on the knowledge collection Runbooks, which only its readers"
    )
    assert "team memory is shown in every chat" in answer and 'scope "chat"' in answer
    shared = remember(context, "user", visibility="shared")
    assert shared.startswith("Not stored") and "shown in every chat" in shared
    assert not MemoryEntry.objects.exists()
    assert "Not stored" not in remember(context, "chat")
    entry = MemoryEntry.objects.get()
    assert [(s["kind"], s["id"]) for s in entry.sources] == [("collection", restricted.pk)]
    assert "Not stored" not in remember(context, "user", "Keeps the runbook.", visibility="private")


def test_a_team_skill_drawn_from_a_restricted_collection_is_refused(restricted, team_chat, member):
    context = searched_turn(web_turn(team_chat, member))
    answer = SKILL_MANAGE_TOOL.handler(
        context,
        {
            "action": "create",
            "name": "full-disk",
            "content": skill_md(name="full-disk", description="Free a full disk."),
        },
    )
    assert answer.startswith(
        "Error: nothing was stored: this draws on the knowledge collection Runbooks"
    )
    assert "a team skill is indexed in every chat" in answer and 'scope "chat"' in answer
    assert not Skill.objects.exists() and not SkillProposal.objects.exists()


def test_a_collection_everyone_may_read_bounds_nothing(owner, member, team_chat):
    collection = runbooks(everyone=True, name="Handbook")
    collection_turn_on(collection=collection, chat=team_chat, by=owner)
    context = searched_turn(web_turn(team_chat, member))
    assert [s["everyone"] for s in work_sources(context)] == [True]
    answer = remember(context, "team")
    assert "Not stored" not in answer and "team memory" in answer.lower()
    assert [s["name"] for s in MemoryEntry.objects.get().sources] == ["Handbook"]
    answer = SKILL_MANAGE_TOOL.handler(
        context,
        {
            "action": "create",
            "name": "full-disk",
            "content": skill_md(name="full-disk", description="Free a full disk."),
        },
    )
    assert "Proposed" in answer, answer
    assert [s["name"] for s in SkillProposal.objects.get().sources] == ["Handbook"]


def test_the_approvals_page_names_the_collection_to_its_readers_only(
    restricted, team_chat, owner, member, outsider, make_person
):
    context = searched_turn(web_turn(team_chat, member))
    assert "Not stored" not in remember(context, "chat")
    link = f'the knowledge collection <a href="/knowledge/{restricted.pk}/" class="source-file">'
    page = login(owner).get("/memory/approvals/").content.decode()
    assert FACT[:20] in page and link + "Runbooks</a>" in page
    # Staff who do not read the collection review the chat's memory without its name.
    staff = make_person("stella", is_staff=True, is_superuser=True)
    page = login(staff).get("/memory/approvals/").content.decode()
    assert FACT[:20] in page
    assert "Runbooks" not in page and "a knowledge collection you do not read" in page
    assert login(staff).get(f"/knowledge/{restricted.pk}/").status_code == 404
    # An outsider and a member of another group: nothing of it.
    assert "Runbooks" not in login(outsider).get("/memory/approvals/").content.decode()
    stranger = make_person("greta")
    group, _ = chat_get_or_create(channel="telegram", chat_id="-100777", title="Other group")
    chat_member_ensure(chat=group, person=stranger)
    message_ingest(channel="telegram", chat_id="-100777", user_id="g", text="hi")
    assert "Runbooks" not in login(stranger).get("/memory/approvals/").content.decode()


def test_a_personal_skill_from_a_restricted_collection_names_it_to_its_readers_only(
    owner, make_person, settings
):
    """In the owner's own terminal (its one reader) a skill drawn from a collection only they
    read is personal; a skill reviewer who does not read the collection reviews a change to it
    without the collection's name, one who reads it sees it; it is never promoted."""
    profile, _ = chat_get_or_create(channel="cli", chat_id=f"profile-{owner.pk}", kind="cli")
    chat_member_ensure(chat=profile, person=owner, role="owner")
    collection = runbooks(readers=[owner], name="Private runbooks")
    collection_turn_on(collection=collection, chat=profile, by=owner)
    context = searched_turn(web_turn(profile, owner))
    created = SKILL_MANAGE_TOOL.handler(
        context,
        {
            "action": "create",
            "name": "full-disk",
            "content": skill_md(name="full-disk", description="Free a full disk."),
        },
    )
    assert "personal skill" in created, created
    settings.SKILLS_APPROVAL = "review"
    patch = SKILL_MANAGE_TOOL.handler(
        context,
        {
            "action": "patch",
            "name": "full-disk",
            "old_string": "Free a full disk.",
            "new_string": "Free a full disk, then remove rotated logs.",
        },
    )
    assert "Proposed" in patch, patch
    assert [s["id"] for s in SkillProposal.objects.get().sources] == [collection.pk]
    stranger = make_person("stella", is_staff=True)
    page = login(stranger).get("/memory/approvals/").content.decode()
    assert "full-disk" in page and "a knowledge collection you do not read" in page
    assert "Private runbooks" not in page
    reader = make_person("rita", is_staff=True)
    collection.readers.add(reader)
    page = login(reader).get("/memory/approvals/").content.decode()
    assert f'<a href="/knowledge/{collection.pk}/" class="source-file">Private runbooks</a>' in page
    with pytest.raises(SkillInvalid, match=r"\(Private runbooks\)"):
        skill_promote(name="full-disk", shown_version=1, person=stranger)
    assert Skill.objects.get().scope == "personal"
