"""Memory and skill proposals drawn from a file carry the file as their source: the files on
the message a turn answers and those it read with attachment_read (or a review's range).
Such a proposal never lands where more people read it than the file's chat's readers, and
the review pages link the file for those readers only (the download stays readers-only)."""

import json

import pytest

from attachments.services import attachment_store
from chats.agent.registry import ORIGIN_REVIEW, TurnContext
from chats.models import ChatKind, ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from chats.work_sources import work_sources
from memory.models import MemoryEntry, MemoryEvent
from memory.tools import MEMORY_TOOL
from skills.models import Scope, Skill, SkillProposal
from skills.outcomes import SkillInvalid
from skills.reviews import skill_promote, skill_proposal_decide
from skills.tools import SKILL_MANAGE_TOOL
from tests.chats.dashboard_helpers import login
from tests.skills.helpers import skill_md

pytestmark = pytest.mark.django_db

RUNBOOK = b"Restart the queue with make restart-queue, then check /healthz.\n"


@pytest.fixture
def filed(say):
    """A message in the team room with a file on it."""
    message = say("here is our runbook")
    attachment = attachment_store(message=message, name="runbook.txt", data=RUNBOOK)
    return message, attachment


def context_of(message, **extra):
    actor = message.actor
    return TurnContext(
        chat=message.chat,
        trigger=message,
        actor=actor,
        person=actor.person if actor is not None else None,
        **extra,
    )


def remember(context, scope, content, **extra):
    return MEMORY_TOOL.handler(
        context, {"action": "add", "scope": scope, "content": content, **extra}
    )


def read_in_turn(message, attachment_id):
    """The turn answering `message` called attachment_read on `attachment_id` (its stored
    tool-call step, as the engine stores it)."""
    turn = Turn.objects.create(chat=message.chat, trigger=message, status=Turn.Status.RUNNING)
    Message.objects.create(
        chat=message.chat,
        role=Message.Role.ASSISTANT,
        external_id=f"step-{turn.pk}",
        parts=[
            {
                "type": "tool_call",
                "id": "call-1",
                "name": "attachment_read",
                "arguments": json.dumps({"attachment_id": attachment_id, "pages": "1"}),
            }
        ],
        metadata={"turn": turn.pk},
    )
    return turn


# --- the sources ------------------------------------------------------------------------


def test_a_chat_memory_from_a_file_names_the_file(filed):
    message, attachment = filed
    answer = remember(context_of(message), "chat", "Restart the queue with make restart-queue.")
    assert "Not stored" not in answer
    entry = MemoryEntry.objects.get()
    assert entry.sources == [
        {
            "kind": "file",
            "id": attachment.pk,
            "name": "runbook.txt",
            "chat_id": message.chat_id,
            "how": "attached",
            "url": f"/attachments/{attachment.pk}/download",
        }
    ]
    event = MemoryEvent.objects.get(kind=MemoryEvent.Kind.PROPOSED)
    assert [source["id"] for source in event.detail["sources"]] == [attachment.pk]


def test_a_message_without_files_has_no_sources(say):
    message = say("remember the office is in Rome")
    assert work_sources(context_of(message)) == []
    assert "Proposed for team memory" in remember(context_of(message), "team", "Office in Rome.")
    assert MemoryEntry.objects.get().sources == []


def test_a_file_read_in_the_turn_is_a_source_and_another_chats_is_not(say, owner):
    earlier = say("the manual")
    manual = attachment_store(message=earlier, name="manual.txt", data=b"the manual text\n")
    other, _ = chat_get_or_create(channel="web", chat_id="side", title="Side")
    chat_member_ensure(chat=other, person=owner, role=ChatMember.Role.OWNER)
    elsewhere = attachment_store(message=say("x", chat=other), name="x.txt", data=b"other\n")
    message = say("what does the manual say about restarts?")
    turn = read_in_turn(message, manual.pk)
    read_in_turn_same = Message.objects.create(
        chat=message.chat,
        role=Message.Role.ASSISTANT,
        external_id="step-other",
        parts=[
            {
                "type": "tool_call",
                "name": "attachment_read",
                "arguments": {"attachment_id": elsewhere.pk},
            }
        ],
        metadata={"turn": turn.pk},
    )
    assert read_in_turn_same.pk
    sources = work_sources(context_of(message, turn=turn))
    assert [(source["name"], source["how"]) for source in sources] == [("manual.txt", "read")]


# --- where it may land ------------------------------------------------------------------


def test_team_memory_from_a_file_is_refused(filed):
    message, _ = filed
    answer = remember(context_of(message), "team", "Restart the queue with make restart-queue.")
    assert answer.startswith("Not stored: this draws on a file of this chat (runbook.txt)")
    assert "team memory is shown in every chat" in answer and 'scope "chat"' in answer
    assert not MemoryEntry.objects.exists()


def test_a_shared_entry_about_a_person_from_a_file_is_refused_a_private_one_is_kept(filed):
    message, _ = filed
    context = context_of(message)
    shared = remember(context, "user", "Owns the runbook.", visibility="shared")
    assert shared.startswith("Not stored") and "shown in every chat" in shared
    assert not MemoryEntry.objects.exists()
    private = remember(context, "user", "Keeps the runbook.", visibility="private")
    assert "Not stored" not in private
    assert [s["name"] for s in MemoryEntry.objects.get().sources] == ["runbook.txt"]


def test_a_replacement_from_a_file_is_held_to_the_same_rule(say, filed):
    plain = say("remember: deploys on Fridays")
    assert "Proposed" in remember(context_of(plain), "chat", "Deploys on Fridays.")
    message, _ = filed
    answer = MEMORY_TOOL.handler(
        context_of(message),
        {"action": "replace", "scope": "chat", "old_text": "Fridays", "content": "Deploys daily."},
    )
    assert "Not stored" not in answer
    entry = MemoryEntry.objects.get()
    assert [s["name"] for s in entry.sources] == ["runbook.txt"]
    # Removing carries no file text: never refused for it.
    answer = MEMORY_TOOL.handler(
        context_of(message), {"action": "remove", "scope": "chat", "old_text": "Deploys"}
    )
    assert "Not stored" not in answer


def test_a_review_reading_a_file_in_its_range_is_held_to_the_rule(filed):
    message, _ = filed
    turn = Turn.objects.create(chat=message.chat, trigger=message, status=Turn.Status.COMPLETED)
    context = TurnContext(
        chat=message.chat,
        trigger=message,
        turn=turn,
        origin=ORIGIN_REVIEW,
        review_id=None,
        covers_after_id=message.pk - 1,
    )
    answer = remember(context, "team", "Restart the queue with make restart-queue.")
    assert answer.startswith("Not stored: this draws on a file of this chat (runbook.txt)")
    later = TurnContext(
        chat=message.chat,
        trigger=message,
        turn=turn,
        origin=ORIGIN_REVIEW,
        covers_after_id=message.pk,
    )
    assert work_sources(later) == []  # the file is before the range


# --- the review pages -------------------------------------------------------------------


def test_the_approvals_page_links_the_file_for_its_chats_readers_only(
    filed, owner, member, outsider, make_person, api_for
):
    message, attachment = filed
    remember(context_of(message), "chat", "Restart the queue with make restart-queue.")
    url = f"/attachments/{attachment.pk}/download"
    page = login(owner).get("/memory/approvals/").content.decode()
    assert f'the file <a href="{url}" class="source-file">runbook.txt</a>' in page
    assert login(owner).get(url).status_code == 200
    # Staff who do not read the chat may review it, but never see the file's name or bytes.
    staff = make_person("stella", is_staff=True, is_superuser=True)
    page = login(staff).get("/memory/approvals/").content.decode()
    assert "Restart the queue" in page  # staff decide chat memory
    assert "runbook.txt" not in page and "a file in a chat you do not read" in page
    assert login(staff).get(url).status_code == 404
    # An outsider, a member of another group and another person's integration: nothing.
    assert "runbook.txt" not in login(outsider).get("/memory/approvals/").content.decode()
    assert login(outsider).get(url).status_code == 404
    stranger = make_person("greta")
    group, _ = chat_get_or_create(channel="telegram", chat_id="-100777", title="Other group")
    chat_member_ensure(chat=group, person=stranger)
    message_ingest(channel="telegram", chat_id="-100777", user_id="g", text="hi")
    assert "runbook.txt" not in login(stranger).get("/memory/approvals/").content.decode()
    assert login(stranger).get(url).status_code == 404
    assert api_for(outsider).get(f"/api/v1/attachments/{attachment.pk}").status_code == 404


# --- skills -----------------------------------------------------------------------------


def create_skill(context, name="queue-restart"):
    return SKILL_MANAGE_TOOL.handler(
        context,
        {
            "action": "create",
            "name": name,
            "content": skill_md(name=name, description="Restart the queue."),
        },
    )


@pytest.fixture
def staff_reviewer(make_person):
    return make_person("stella", is_staff=True)


@pytest.fixture
def terminal_file(owner):
    """`owner`'s own terminal profile (its one reader), a message there with a file."""
    chat, _ = chat_get_or_create(channel="cli", chat_id=f"profile-{owner.pk}", kind=ChatKind.CLI)
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    message = message_ingest(
        channel="cli",
        chat_id=f"profile-{owner.pk}",
        user_id=owner.pk,
        text="my notes",
        person=owner,
    ).message
    attachment = attachment_store(message=message, name="notes.txt", data=RUNBOOK)
    return message, attachment


def test_a_team_skill_from_a_file_of_a_shared_chat_is_refused(filed):
    message, _ = filed
    answer = create_skill(context_of(message))
    assert answer.startswith("Error: nothing was stored: this draws on a file of this chat")
    assert "(runbook.txt)" in answer and "a team skill is indexed in every chat" in answer
    assert not Skill.objects.exists() and not SkillProposal.objects.exists()


def test_without_files_a_shared_chat_still_proposes_a_team_skill(say):
    answer = create_skill(context_of(say("make a skill of what we did")))
    assert "Proposed" in answer
    assert SkillProposal.objects.get().sources == []


def test_in_its_owners_private_chat_it_is_a_personal_skill_naming_the_file(
    terminal_file, staff_reviewer
):
    message, attachment = terminal_file
    answer = create_skill(context_of(message))
    assert "personal skill" in answer, answer
    skill = Skill.objects.get()
    assert skill.scope == Scope.PERSONAL
    assert [(s["id"], s["how"]) for s in skill.current_version.sources] == [
        (attachment.pk, "attached")
    ]
    # Asked for the team, it is refused; and a reviewer cannot promote it to the team.
    answer = SKILL_MANAGE_TOOL.handler(
        context_of(message),
        {
            "action": "create",
            "name": "team-one",
            "scope": "team",
            "content": skill_md(name="team-one", description="x"),
        },
    )
    assert answer.startswith("Error: nothing was stored") and "personal" in answer
    with pytest.raises(SkillInvalid, match=r"draws on a file of its owner's private chat"):
        skill_promote(name="queue-restart", shown_version=1, person=staff_reviewer)
    assert Skill.objects.get(slug="queue-restart").scope == Scope.PERSONAL


def test_a_personal_skill_change_waiting_for_review_links_the_file_for_readers_only(
    terminal_file, owner, staff_reviewer, settings
):
    message, attachment = terminal_file
    assert "personal skill" in create_skill(context_of(message))
    settings.SKILLS_APPROVAL = "review"
    patch = SKILL_MANAGE_TOOL.handler(
        context_of(message),
        {
            "action": "patch",
            "name": "queue-restart",
            "old_string": "Restart the queue.",
            "new_string": "Restart the queue, then check /healthz.",
        },
    )
    assert "Proposed" in patch, patch
    proposal = SkillProposal.objects.get()
    assert [s["name"] for s in proposal.sources] == ["notes.txt"]
    # The skill reviewer does not read the owner's terminal: neither name nor link.
    page = login(staff_reviewer).get("/memory/approvals/").content.decode()
    assert "queue-restart" in page and "a file in a chat you do not read" in page
    assert "notes.txt" not in page
    assert login(staff_reviewer).get(attachment_url(attachment)).status_code == 404
    # Approved, the new version keeps what the proposal drew on.
    skill_proposal_decide(
        proposal_id=proposal.pk, decision="approve", shown_version=1, person=staff_reviewer
    )
    version = Skill.objects.get().current_version
    assert version.number == 2 and [s["name"] for s in version.sources] == ["notes.txt"]


def attachment_url(attachment):
    return f"/attachments/{attachment.pk}/download"
