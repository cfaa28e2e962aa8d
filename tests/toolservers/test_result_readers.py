"""A tool result shown in a chat follows that chat's readers: the tool message a turn stored
in chat A is read by A's members on the dashboard and through the API (history, search,
the turn) and by nobody else: not an outsider, not another person's API token, not the
member of another chat."""

import pytest

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, message_received, turn_claim
from chats.models import ChatMember, Message, Turn
from chats.services import api_token_create, chat_member_ensure, message_ingest
from tests.conftest import ApiClient
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.models import ToolCall

pytestmark = pytest.mark.django_db(transaction=True)

RESULT = "quartz-heron-4471"  # what the tool returns: the words to look for


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


def token_client(person) -> ApiClient:
    return ApiClient(api_token_create(person=person)[1])


@pytest.fixture
def scene(fake, make_person):
    """Chat A (Ada owns it, Ben is a member) where a turn called the probe's echo tool, and
    chat B, whose member Cleo is nobody in A; Oscar is in no chat."""
    ada, ben, cleo, oscar = (make_person(n) for n in ("ada", "ben", "cleo", "oscar"))
    result = message_ingest(
        channel="web", chat_id="room-a", user_id=str(ada.pk), text="echo it", member=ada
    )
    chat_a = result.chat
    ChatMember.objects.filter(chat=chat_a, person=ada).update(role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat_a, person=ben)
    chat_b = message_ingest(
        channel="web", chat_id="room-b", user_id=str(cleo.pk), text="hi", member=cleo
    ).chat
    enable(chat_a, add_server("probe", stdio=[PYTHON, PROBE]), tool="echo", policy="allow")
    fake.script(
        fake_openai.tool_calls([("c1", "probe__echo", {"text": RESULT})]),
        fake_openai.text("Done."),
    )
    turn = message_received(result, enqueue=False)
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    turn = run_claimed_turn(claim.turn, provider=get_provider())
    assert turn.status == Turn.Status.COMPLETED
    tool_message = Message.objects.get(chat=chat_a, role=Message.Role.TOOL)
    assert tool_message.text == f"echo: {RESULT}"
    assert ToolCall.objects.get(chat=chat_a).result_excerpt == f"echo: {RESULT}"
    return {
        "a": chat_a,
        "b": chat_b,
        "turn": turn,
        "message": tool_message,
        "ada": ada,
        "ben": ben,
        "cleo": cleo,
        "oscar": oscar,
    }


def test_the_chats_members_read_the_tool_result(client, scene):
    for person in (scene["ada"], scene["ben"]):
        client.force_login(person)
        page = client.get(f"/chats/{scene['a'].chat_key}/")
        assert page.status_code == 200 and RESULT in page.content.decode()
        api = token_client(person)
        history = api.get(f"/api/v1/chats/{scene['a'].chat_key}/messages").json()
        tool_rows = [m for m in history["messages"] if m["role"] == "tool"]
        assert [m["text"] for m in tool_rows] == [f"echo: {RESULT}"]
        hits = api.get("/api/v1/search", {"q": RESULT}).json()["results"]
        assert {hit["chat_key"] for hit in hits} == {scene["a"].chat_key}
        assert api.get(f"/api/v1/turns/{scene['turn'].pk}").status_code == 200
        searched = client.get("/search", {"q": RESULT}).content.decode()
        assert scene["a"].chat_key in searched  # found, in A
        assert client.get(f"/chats/{scene['a'].chat_key}/tools").status_code == 200


@pytest.mark.parametrize("who", ["oscar", "cleo"], ids=["outsider", "member of another chat"])
def test_nobody_else_reads_it_on_the_dashboard_or_through_the_api(client, scene, who):
    person = scene[who]
    client.force_login(person)
    key = scene["a"].chat_key
    for path in (f"/chats/{key}/", f"/chats/{key}/tools"):
        response = client.get(path)
        assert response.status_code == 404 and RESULT not in response.content.decode(), path
    searched = client.get("/search", {"q": RESULT}).content.decode()
    assert "echo: " not in searched and scene["a"].chat_key not in searched
    api = token_client(person)  # their own token: another person's reach, not Ada's
    assert api.get(f"/api/v1/chats/{key}/messages").status_code == 404
    assert api.get("/api/v1/search", {"q": RESULT}).json()["results"] == []
    assert api.get(f"/api/v1/turns/{scene['turn'].pk}").status_code == 404
    # Cleo's token reads her own chat, never A's result in it.
    if who == "cleo":
        own = api.get(f"/api/v1/chats/{scene['b'].chat_key}/messages").json()
        assert own["messages"] and RESULT not in str(own)


def test_a_member_who_left_reads_it_no_more_with_a_still_valid_token(scene):
    """Ben's token reads A's history because Ben is a member; once Ben leaves the chat his
    token (still valid) reads nothing of it."""
    api = token_client(scene["ben"])
    key = scene["a"].chat_key
    assert RESULT in str(api.get(f"/api/v1/chats/{key}/messages").json())
    ChatMember.objects.filter(chat=scene["a"], person=scene["ben"]).delete()
    assert api.get(f"/api/v1/chats/{key}/messages").status_code == 404
    assert api.get("/api/v1/search", {"q": RESULT}).json()["results"] == []
