"""The /v1 endpoints' requests and answers that need no worker: refusals in OpenAI's error
shape (checked before anything is stored), the body limit of its own, and the stream's
chunks, including what it says while a tool call waits for the person's decision."""

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync

from chats.models import ApiToken, Message, Turn
from chats.services import api_token_create
from openai_api import completions, responses
from openai_api.parsing import ConversationRequest
from openai_api.services import conversation_post
from tests.conftest import ApiClient

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

URL = "/v1/chat/completions"


@pytest.fixture
def sdk_like(owner):
    _, key = api_token_create(person=owner, kind=ApiToken.Kind.PERSONAL)
    return ApiClient(key)


def hello(**extra):
    return {"model": "hermes-hub", "messages": [{"role": "user", "content": "hi"}]} | extra


def assert_openai_error(response, status, *, code=None, param=None):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (hello(model="gpt-4o"), 404, "model"),
        (hello(tools=[{"type": "function", "function": {"name": "f"}}]), 400, "tools"),
        (hello(functions=[{"name": "f"}]), 400, "functions"),
        (
            {"model": "hermes-hub", "messages": [{"role": "tool", "content": "x"}]},
            400,
            "messages[0]",
        ),
        ({"model": "hermes-hub", "messages": []}, 400, "messages"),
        (
            {"model": "hermes-hub", "messages": [{"role": "assistant", "content": "x"}]},
            400,
            "messages",
        ),
        (
            {
                "model": "hermes-hub",
                "messages": [{"role": "user", "content": [{"type": "image_url"}]}],
            },
            400,
            "messages[0].content[0]",
        ),
        (hello(n=2), 400, "n"),
        (hello(stream="yes"), 400, "stream"),
    ],
)
def test_bad_requests_are_refused_and_store_nothing(sdk_like, body, status, param):
    assert_openai_error(sdk_like.post(URL, body), status, param=param)
    assert not Message.objects.exists()


def test_refusals_of_keys_and_methods(owner, sdk_like):
    assert_openai_error(ApiClient(None).post(URL, hello()), 401, code="invalid_api_key")
    _, integration = api_token_create(person=owner)
    assert_openai_error(ApiClient(integration).post(URL, hello()), 403, code="wrong_token_kind")
    assert_openai_error(sdk_like.get(URL), 405)
    assert_openai_error(sdk_like.get("/v1/embeddings"), 404, code="not_found")
    assert not Message.objects.exists()


def test_v1_has_its_own_larger_body_limit(sdk_like, settings):
    settings.API_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    settings.OPENAI_API_MAX_BODY_BYTES = 8192
    big = "x" * 4000
    # Past API v1's limit, within /v1's: read and parsed (the wrong model is what fails).
    body = hello(model="nope", messages=[{"role": "user", "content": big}])
    assert_openai_error(sdk_like.post(URL, body), 404, code="model_not_found")
    body = hello(messages=[{"role": "user", "content": big * 3}])
    assert_openai_error(sdk_like.post(URL, body), 413)
    assert not Message.objects.exists()


def events_of(*events):
    async def follow():
        for event in events:
            yield event

    return follow()


def collect(landed, follow, include_usage=False):
    async def run():
        return [
            piece
            async for piece in completions._chunks(landed, follow, "chatcmpl-x", include_usage)
        ]

    return async_to_sync(run)()


def data_of(pieces):
    return [json.loads(p[6:]) for p in pieces if p.startswith("data: {")]


def test_the_stream_says_when_a_tool_call_waits_for_a_decision(owner):
    landed = conversation_post(
        person=owner,
        request=ConversationRequest(
            items=(("user", "reset the repo"),),
            system="",
            chat_key=None,
            stream=True,
            include_usage=True,
        ),
    )
    reply = Message.objects.create(
        chat=landed.chat, role="assistant", text="Done: reset.", external_id="r1"
    )
    Turn.objects.filter(pk=landed.turn.pk).update(
        status="completed", reply=reply, prompt_tokens=120, completion_tokens=7
    )
    turn_id = landed.turn.pk
    pieces = collect(
        landed,
        events_of(
            {"type": "turn.started", "turn_id": turn_id},
            {"type": "turn.waiting", "turn_id": turn_id, "reason": "approval of git__git_reset"},
            {"type": "turn.started", "turn_id": turn_id, "resumed": True},
            {"type": "turn.delta", "turn_id": turn_id, "text": "Done: "},
            {"type": "turn.finished", "turn_id": turn_id},
        ),
        include_usage=True,
    )
    assert ": waiting for approval of git__git_reset\n\n" in pieces
    chunks = data_of(pieces)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    waiting = [c for c in chunks if c.get("hermes", {}).get("status") == "waiting"]
    assert waiting[0]["hermes"]["reason"] == "approval of git__git_reset"
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == "Done: reset."  # the stored reply completes what the deltas said
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 7,
        "total_tokens": 127,
    }
    assert pieces[-1] == "data: [DONE]\n\n"


def test_a_failed_turn_ends_the_stream_with_an_error(owner):
    landed = conversation_post(
        person=owner,
        request=ConversationRequest(
            items=(("user", "hi"),), system="", chat_key=None, stream=True, include_usage=False
        ),
    )
    Turn.objects.filter(pk=landed.turn.pk).update(status="failed", error="the model is down")
    pieces = collect(landed, events_of({"type": "turn.failed", "turn_id": landed.turn.pk}))
    errors = [c for c in data_of(pieces) if "error" in c]
    assert "the model is down" in errors[0]["error"]["message"]
    assert pieces[-1] == "data: [DONE]\n\n"


def test_the_model_by_id(sdk_like):
    assert sdk_like.get("/v1/models/hermes-hub").json()["id"] == "hermes-hub"
    assert_openai_error(sdk_like.get("/v1/models/gpt-4o"), 404, code="model_not_found")
    assert_openai_error(ApiClient("hk_wrong").get("/v1/models/hermes-hub"), 401)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "hermes-hub", "input": [{"type": "function_call_output"}]}, "input[0]"),
        ({"model": "hermes-hub", "input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
        ({"model": "hermes-hub", "input": ""}, "input"),
        (
            {
                "model": "hermes-hub",
                "input": "hi",
                "previous_response_id": "r",
                "conversation": "c",
            },
            "conversation",
        ),
    ],
)
def test_bad_responses_requests_are_refused(sdk_like, body, param):
    assert_openai_error(sdk_like.post("/v1/responses", body), 400, param=param)
    assert not Message.objects.exists()


def test_responses_refuse_unknown_previous_ids_and_foreign_conversations(sdk_like, member):
    theirs = conversation_post(
        person=member,
        request=ConversationRequest(
            items=(("user", "mine"),), system="", chat_key=None, stream=False, include_usage=False
        ),
    )
    body = {"model": "hermes-hub", "input": "hi", "previous_response_id": "resp_nope"}
    assert_openai_error(
        sdk_like.post("/v1/responses", body), 404, code="previous_response_not_found"
    )
    body = {"model": "hermes-hub", "input": "hi", "conversation": {"id": theirs.chat.chat_key}}
    assert_openai_error(sdk_like.post("/v1/responses", body), 404, code="chat_not_found")
    assert Message.objects.count() == 1


def waiting_then_silent(turn_id, *events):
    """The turn's events, then nothing more: it waits for the person's decision."""

    async def follow():
        for event in events:
            yield event
        await asyncio.Event().wait()  # until cancelled

    return follow()


def whole(module, landed, follow):
    person = landed.trigger.actor.person  # whose key asked

    async def run():
        if module is completions:
            return await completions._whole(landed, follow, "chatcmpl-x", person)
        return await responses._whole(landed, follow, "resp_x", person)

    return async_to_sync(run)()


@pytest.mark.parametrize("module", [completions, responses], ids=["chat", "responses"])
def test_a_non_streaming_request_waits_for_a_decision_only_so_long(owner, settings, module):
    settings.OPENAI_API_APPROVAL_WAIT_SECONDS = 0
    landed = conversation_post(
        person=owner,
        request=ConversationRequest(
            items=(("user", "reset the repo"),),
            system="",
            chat_key=None,
            stream=False,
            include_usage=False,
        ),
    )
    status = Turn.objects.get(pk=landed.turn.pk).status
    turn_id = landed.turn.pk
    reason = "approval of git__git_reset"
    follow = waiting_then_silent(
        turn_id,
        {"type": "turn.started", "turn_id": turn_id},
        {"type": "turn.waiting", "turn_id": turn_id, "reason": reason},
    )
    response = whole(module, landed, follow)
    assert response.status_code == 409
    error = json.loads(response.content)["error"]
    assert error["code"] == "approval_pending" and error["type"] == "invalid_request_error"
    assert reason in error["message"] and "send the same request again" in error["message"]
    assert response["Retry-After"]
    # The turn goes on waiting: nothing stopped it.
    turn = Turn.objects.get(pk=turn_id)
    assert turn.status == status and not turn.interrupt_reason


@pytest.mark.parametrize("module", [completions, responses], ids=["chat", "responses"])
def test_a_decision_within_the_bound_gives_the_answer(owner, settings, module):
    settings.OPENAI_API_APPROVAL_WAIT_SECONDS = 30
    landed = conversation_post(
        person=owner,
        request=ConversationRequest(
            items=(("user", "reset the repo"),),
            system="",
            chat_key=None,
            stream=False,
            include_usage=False,
        ),
    )
    reply = Message.objects.create(
        chat=landed.chat, role="assistant", text="Done: reset.", external_id="r1"
    )
    Turn.objects.filter(pk=landed.turn.pk).update(status="completed", reply=reply)
    turn_id = landed.turn.pk
    follow = events_of(
        {"type": "turn.waiting", "turn_id": turn_id, "reason": "approval of git__git_reset"},
        {"type": "turn.started", "turn_id": turn_id, "resumed": True},
        {"type": "turn.finished", "turn_id": turn_id},
    )
    response = whole(module, landed, follow)
    assert response.status_code == 200
    assert "Done: reset." in response.content.decode()


def own_conversation(person, text):
    return conversation_post(
        person=person,
        request=ConversationRequest(
            items=(("user", text),), system="", chat_key=None, stream=False, include_usage=False
        ),
    )


def test_previous_response_id_decides_the_chat_and_a_conflicting_name_is_a_400(owner, sdk_like):
    from openai_api.models import StoredResponse

    first, other = own_conversation(owner, "first"), own_conversation(owner, "other")
    StoredResponse.objects.create(
        response_id="resp_1", person=owner, chat=first.chat, turn=first.turn
    )
    stored = Message.objects.count()
    body = {"model": "hermes-hub", "input": "more", "previous_response_id": "resp_1"}
    in_header = {"X-Hermes-Chat": other.chat.chat_key}
    in_metadata = body | {"metadata": {"chat": other.chat.chat_key}}
    for response in (
        sdk_like.post("/v1/responses", body, headers=in_header),
        sdk_like.post("/v1/responses", in_metadata),
    ):
        error = assert_openai_error(
            response, 400, code="conflicting_chat", param="previous_response_id"
        )
        assert "previous_response_id" in error["message"]
    assert Message.objects.count() == stored
    # Naming the response's own chat as well is no conflict.
    parsed = responses.parse_responses(
        type("Request", (), {"headers": {"X-Hermes-Chat": first.chat.chat_key}})(), body
    )
    assert responses._previous_chat_key(owner, parsed).conversation.chat_key == first.chat.chat_key


def test_every_way_of_naming_a_chat_must_agree(owner, sdk_like):
    mine = own_conversation(owner, "mine")
    stored = Message.objects.count()
    header = {"X-Hermes-Chat": mine.chat.chat_key}
    elsewhere = {"chat": "openai:elsewhere"}
    cases = [
        (URL, hello(metadata=elsewhere), "metadata.chat"),
        (
            "/v1/responses",
            {"model": "hermes-hub", "input": "x", "metadata": elsewhere},
            "metadata.chat",
        ),
        (
            "/v1/responses",
            {"model": "hermes-hub", "input": "x", "conversation": "openai:elsewhere"},
            "conversation",
        ),
    ]
    for url, body, param in cases:
        response = sdk_like.post(url, body, headers=header)
        assert_openai_error(response, 400, code="conflicting_chat", param=param)
    assert Message.objects.count() == stored
