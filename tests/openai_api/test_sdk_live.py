"""The official `openai` SDK against a running hub (daphne + a Celery worker + the fake model):
the must-shows of docs/OPENAI.md, end to end through real processes."""

import time

import httpx
import openai
import pytest

from chats.models import Actor, ApiToken, Chat, ChatMember, Message, Turn
from chats.services import (
    api_token_create,
    api_token_revoke,
    chat_get_or_create,
    chat_member_ensure,
)
from tests.fakes import openai_server as fake_openai
from tests.toolservers.conftest import PROBE, PYTHON, add_server, enable
from toolservers.approvals import Decision, approval_decide
from toolservers.models import ToolApproval

pytestmark = pytest.mark.timeout(240)


def client(stack, key) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def user_and_assistant(chat):
    return list(
        Message.objects.filter(chat=chat, role__in=["user", "assistant"])
        .order_by("id")
        .values_list("role", "text")
    )


def test_the_sdk_talks_to_the_agent_as_the_person(live_stack, fake_llm, make_person):
    alice = make_person("alice")
    _, key = api_token_create(person=alice, kind=ApiToken.Kind.PERSONAL)
    sdk = client(live_stack, key)

    assert [model.id for model in sdk.models.list()] == ["hermes-hub"]

    fake_llm.script(fake_openai.text("Deploys happen on Tuesdays."))
    conversation = [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "When do we deploy?"},
    ]
    first = sdk.chat.completions.create(model="hermes-hub", messages=conversation)
    answer = first.choices[0].message.content
    assert answer == "Deploys happen on Tuesdays."
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0
    turn = Turn.objects.get(pk=first.model_extra["hermes"]["turn_id"])
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (
        turn.prompt_tokens,
        turn.completion_tokens,
    )

    # The person's own private chat, the message theirs through the `openai` channel.
    chat = Chat.objects.get(channel="openai")
    assert list(chat.memberships.values_list("person__username", flat=True)) == ["alice"]
    question = Message.objects.get(chat=chat, role="user")
    assert question.actor.channel == "openai" and question.actor.person == alice
    # The client's system message is a note added to the hub's prompt, not a replacement.
    system_prompt = fake_llm.last_request["messages"][0]["content"]
    assert "Answer in one sentence." in system_prompt
    assert "You are Hermes" in system_prompt

    # Streaming, resending the whole conversation: one more question lands in the same chat.
    conversation += [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And hotfixes?"},
    ]
    fake_llm.script(fake_openai.text("Hotfixes go out any day after review."))
    stream = sdk.chat.completions.create(
        model="hermes-hub",
        messages=conversation,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == "Hotfixes go out any day after review."
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    # A third call, again the whole conversation: every message is stored exactly once.
    conversation += [
        {"role": "assistant", "content": streamed},
        {"role": "user", "content": "Thanks!"},
    ]
    fake_llm.script(fake_openai.text("You're welcome."))
    sdk.chat.completions.create(model="hermes-hub", messages=conversation)
    assert Chat.objects.filter(channel="openai").count() == 1
    assert user_and_assistant(chat) == [
        ("user", "When do we deploy?"),
        ("assistant", "Deploys happen on Tuesdays."),
        ("user", "And hotfixes?"),
        ("assistant", "Hotfixes go out any day after review."),
        ("user", "Thanks!"),
        ("assistant", "You're welcome."),
    ]

    # An edit of an earlier message forks a new chat from the common prefix.
    fake_llm.script(fake_openai.text("Release candidates go out on Mondays."))
    edited = conversation[:3] + [{"role": "user", "content": "And release candidates?"}]
    sdk.chat.completions.create(model="hermes-hub", messages=edited)
    fork = Chat.objects.filter(channel="openai").exclude(pk=chat.pk).get()
    assert user_and_assistant(fork) == [
        ("user", "When do we deploy?"),
        ("assistant", "Deploys happen on Tuesdays."),
        ("user", "And release candidates?"),
        ("assistant", "Release candidates go out on Mondays."),
    ]
    assert len(user_and_assistant(chat)) == 6  # the original is untouched


def test_refusals_in_openais_shape(live_stack, fake_llm, make_person):
    alice, bob = make_person("alice"), make_person("bob")
    token, key = api_token_create(person=alice, kind=ApiToken.Kind.PERSONAL)
    _, integration = api_token_create(person=alice)
    bobs_room, _ = chat_get_or_create(channel="web", chat_id="bobs-room", kind="room")
    chat_member_ensure(chat=bobs_room, person=bob, role=ChatMember.Role.OWNER)
    telegram_dm, _ = chat_get_or_create(channel="telegram", chat_id="42", kind="dm")
    chat_member_ensure(chat=telegram_dm, person=alice)
    sdk = client(live_stack, key)
    ask = {"model": "hermes-hub", "messages": [{"role": "user", "content": "hi"}]}

    # Another person's chat named in the header: not visible, so not found.
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(**ask, extra_headers={"X-Hermes-Chat": bobs_room.chat_key})
    # Her own Telegram chat: refused, it belongs to the Telegram adapter.
    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk.chat.completions.create(**ask, metadata={"chat": telegram_dm.chat_key})
    assert refused.value.body["code"] == "chat_not_allowed"
    # Client-side tools: a clear 400.
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.chat.completions.create(
            **ask, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]
        )
    assert "own tools" in refused.value.body["message"]
    # An integration token is not a personal key.
    with pytest.raises(openai.PermissionDeniedError):
        client(live_stack, integration).models.list()
    assert not Message.objects.exists()

    api_token_revoke(token=token)
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk.models.list()
    assert refused.value.status_code == 401
    assert set(refused.value.body) == {"message", "type", "param", "code"}
    assert refused.value.body["code"] == "invalid_api_key"


def test_a_named_web_room_gets_the_message_as_the_person(live_stack, fake_llm, make_person):
    alice = make_person("alice")
    _, key = api_token_create(person=alice, kind=ApiToken.Kind.PERSONAL)
    room, _ = chat_get_or_create(channel="web", chat_id="ops", kind="room")
    chat_member_ensure(chat=room, person=alice)
    fake_llm.script(fake_openai.text("Noted."))

    answer = client(live_stack, key).chat.completions.create(
        model="hermes-hub",
        messages=[{"role": "user", "content": "Deploy is done."}],
        extra_headers={"X-Hermes-Chat": room.chat_key},
    )
    assert answer.choices[0].message.content == "Noted."
    message = Message.objects.get(chat=room, role="user")
    assert message.actor == Actor.objects.get(channel="web", person=alice)
    assert message.metadata["via"] == "openai"
    assert not Chat.objects.filter(channel="openai").exists()


def test_a_client_disconnect_stops_the_turn(live_stack, fake_llm, make_person):
    alice = make_person("alice")
    _, key = api_token_create(person=alice, kind=ApiToken.Kind.PERSONAL)
    fake_llm.script(fake_openai.text("word " * 400, delay=0.05))
    body = {
        "model": "hermes-hub",
        "stream": True,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    headers = {"Authorization": f"Bearer {key}"}
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST", f"{live_stack.url}/v1/chat/completions", json=body, headers=headers
        ) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if '"content": "word' in line:
                break  # the answer is streaming: hang up
    turn = wait_for(lambda: Turn.objects.filter(status__in=Turn.FINISHED).first())
    assert turn.status == "interrupted"
    assert turn.interrupt_reason == "the client disconnected"

    # Without streaming too: a client that gives up waiting for the whole answer.
    fake_llm.script(fake_openai.text("word " * 400, delay=0.05))
    body = body | {"stream": False, "messages": [{"role": "user", "content": "Another one."}]}
    with httpx.Client(timeout=2) as http, pytest.raises(httpx.ReadTimeout):
        http.post(f"{live_stack.url}/v1/chat/completions", json=body, headers=headers)
    second = wait_for(
        lambda: Turn.objects.filter(status__in=Turn.FINISHED).exclude(pk=turn.pk).first()
    )
    assert (second.status, second.interrupt_reason) == ("interrupted", "the client disconnected")


def test_responses_follow_previous_response_id(live_stack, fake_llm, make_person):
    alice, bob = make_person("alice"), make_person("bob")
    _, key = api_token_create(person=alice, kind=ApiToken.Kind.PERSONAL)
    _, bobs_key = api_token_create(person=bob, kind=ApiToken.Kind.PERSONAL)
    sdk = client(live_stack, key)

    fake_llm.script(fake_openai.text("The staging host is stg-1."))
    first = sdk.responses.create(
        model="hermes-hub", input="Which host is staging?", instructions="Be brief."
    )
    assert first.output_text == "The staging host is stg-1."
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    chat = Chat.objects.get(channel="openai")

    fake_llm.script(fake_openai.text("Production is prod-1."))
    events = list(
        sdk.responses.create(
            model="hermes-hub",
            input="And production?",
            previous_response_id=first.id,
            stream=True,
        )
    )
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Production is prod-1." == events[-1].response.output_text
    # The same chat, the new input only, the model saw the earlier exchange.
    assert user_and_assistant(chat) == [
        ("user", "Which host is staging?"),
        ("assistant", "The staging host is stg-1."),
        ("user", "And production?"),
        ("assistant", "Production is prod-1."),
    ]
    seen = [m["content"] for m in fake_llm.last_request["messages"]]
    assert "The staging host is stg-1." in seen
    assert "Be brief." in seen[0]

    # Someone else's response id continues nothing.
    with pytest.raises(openai.NotFoundError):
        client(live_stack, bobs_key).responses.create(
            model="hermes-hub", input="Show me.", previous_response_id=first.id
        )
    assert Message.objects.filter(text="Show me.").count() == 0


def test_a_call_that_needs_approval_waits_for_the_person_and_the_stream_says_so(
    live_stack, fake_llm, make_person, tmp_path
):
    alice = make_person("alice")
    _, key = api_token_create(person=alice, kind=ApiToken.Kind.PERSONAL)
    sdk = client(live_stack, key)
    fake_llm.script(fake_openai.text("Hello."))
    conversation = [{"role": "user", "content": "hi"}]
    first = sdk.chat.completions.create(model="hermes-hub", messages=conversation)
    chat = Chat.objects.get(channel="openai")
    # The folder append_line writes in is named, so the sandbox shows it.
    enable(chat, add_server("probe", stdio=[PYTHON, PROBE, str(tmp_path)]))

    log = tmp_path / "deploy.log"
    fake_llm.script(
        fake_openai.tool_calls([("c1", "probe__append_line", {"path": str(log), "line": "v2"})]),
        fake_openai.text("Deployed v2."),
    )
    conversation += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "deploy v2"},
    ]
    statuses, text = [], []
    for chunk in sdk.chat.completions.create(
        model="hermes-hub", messages=conversation, stream=True
    ):
        status = (chunk.model_extra.get("hermes") or {}).get("status")
        if status:
            statuses.append(status)
        if status == "waiting":
            assert not log.exists()  # nothing runs before the person decides
            card = ToolApproval.objects.get(turn__chat=chat)
            decided = approval_decide(
                approval_id=card.pk, nonce=card.nonce, person=alice, approve=True
            )
            assert decided.outcome is Decision.DECIDED
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
    assert statuses == ["waiting", "resumed"]
    assert "".join(text) == "Deployed v2."
    assert log.read_text() == "v2\n"
