"""Team knowledge through the engine: the fake model calls `knowledge_search` over real
HTTP, and what it receives (the system prompt, the tool result) proves what reached it."""

import json

import pytest

from chats.agent.turns import message_received
from chats.models import ChatMember
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from knowledge.models import ChatCollection
from knowledge.services import collection_turn_on
from knowledge.vectors import forget
from tests.fakes import openai_server as fake_openai
from tests.knowledge.helpers import runbooks
from tests.turns import run, system_prompt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake(settings):
    forget()
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0, LLM_CONTEXT_TOKENS=16000)
        yield server
    forget()


def say(chat, person, text):
    result = message_ingest(
        channel="web",
        chat_id=chat.external_id,
        user_id=str(person.pk),
        user_name=person.get_username(),
        text=text,
        person=person,
    )
    return message_received(result, enqueue=False)


def tool_result(request, call_id="k1") -> dict:
    content = next(m["content"] for m in request["messages"] if m.get("tool_call_id") == call_id)
    return json.loads(content)


@pytest.fixture
def room(owner, member):
    chat, _ = chat_get_or_create(channel="web", chat_id="ops-room", title="Ops")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    return chat


def test_a_reader_asks_in_a_room_and_the_model_gets_the_right_section_to_cite(
    fake, owner, member, room
):
    collection = runbooks(readers=[owner, member])
    collection_turn_on(collection=collection, chat=room, by=owner)
    fake.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        fake_openai.text("Per the runbook (Full disk): remove rotated logs."),
    )
    run(say(room, member, "what does our runbook say about a full disk?"))
    first, second = fake.requests
    assert "knowledge_search" in {t["function"]["name"] for t in first["tools"]}
    prompt = system_prompt(first)
    assert "## Team knowledge" in prompt and "§ On-call runbook › Disk › Full disk" in prompt
    passages = tool_result(second)["passages"]
    assert passages[0]["section"] == "On-call runbook › Disk › Full disk"


def test_a_room_where_one_member_may_not_read_it_gets_nothing_anywhere(fake, owner, member, room):
    collection = runbooks(readers=[owner])
    ChatCollection.objects.create(chat=room, collection=collection, enabled_by=owner)
    fake.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        fake_openai.text("I found nothing."),
    )
    run(say(room, owner, "what does our runbook say about a full disk?"))
    first, second = fake.requests
    assert "Team knowledge" not in system_prompt(first)
    assert "du -xh" not in json.dumps(first) and "du -xh" not in json.dumps(second)
    assert tool_result(second)["passages"] == []
