"""Citations outside the dashboard: the HTTP API's history, turn and search, and the
OpenAI-compatible /v1 answer (whole and streamed), each rendered for its reader, the token's
person. A reader of the collection now sees "[document § section]" (a link to the viewer in
the API); anyone else "[citation hidden]", and never the passage's text or title; people who
may not read the chat get nothing at all. The stored text keeps its `[K<id>]` references."""

import json

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from chats.models import ApiToken, Message, Turn
from chats.services import api_token_create
from knowledge.citations import HIDDEN
from knowledge.models import Passage
from knowledge.services import collection_remove_readers, collection_turn_on
from openai_api import completions
from openai_api.following import answer_of, outcome
from openai_api.parsing import ConversationRequest
from openai_api.services import Landed, conversation_post
from tests.conftest import ApiClient
from tests.fakes import openai_server as fake_openai
from tests.knowledge.helpers import runbooks
from tests.knowledge.test_citations import (  # noqa: F401 - fixtures
    SECTION,
    ask,
    cite_first_passage,
    fake,
    room,
)
from tests.turns import run

pytestmark = pytest.mark.django_db(transaction=True)

LABEL = f"oncall/runbook.md § {SECTION}"
PASSAGE_WORDS = "du -xh"  # only in the passage's own text, never in the answer's words


def token_for(person, kind=ApiToken.Kind.INTEGRATION) -> ApiClient:
    _, raw = api_token_create(person=person, kind=kind)
    return ApiClient(raw)


def history(api: ApiClient, chat) -> list[dict]:
    response = api.get(f"/api/v1/chats/{chat.chat_key}/messages")
    assert response.status_code == 200, response.content
    return response.json()["messages"]


def text_of(messages: list[dict], message_id: int) -> str:
    return next(m["text"] for m in messages if m["id"] == message_id)


def search(api: ApiClient, words: str = "rotated") -> list[dict]:
    response = api.get("/api/v1/search", {"q": words})
    assert response.status_code == 200, response.content
    return response.json()["results"]


def reply_hit(api: ApiClient, reply) -> dict:
    """The search result of `reply` for the word "rotated"."""
    return next(r for r in search(api) if r["message"]["id"] == reply.pk)


@pytest.fixture
def cited(fake, owner, member, room, make_person):  # noqa: F811
    """A reply in the room citing the runbook (both members were readers when it was given),
    then marco removed from the collection's readers."""
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, member)
    passage = Passage.objects.get(collection=collection, section=SECTION)
    collection_remove_readers(collection=collection, people=[member], by=owner)
    return reply, passage, collection


def test_the_api_shows_the_citation_to_its_reader_and_hides_it_from_everyone_else(
    cited, owner, member, outsider, make_person
):
    reply, passage, collection = cited
    marker = f"[K{passage.pk}]"
    viewer = reverse("knowledge_document", args=[collection.pk, passage.document_id])

    # The reader (the integration token's person): document § section, linked to the viewer.
    reader = token_for(owner)
    messages = history(reader, reply.chat)
    assert f"[{LABEL}]({viewer}#K{passage.pk})" in text_of(messages, reply.pk)
    assert marker not in json.dumps(messages, ensure_ascii=False)
    assert PASSAGE_WORDS in json.dumps(messages)  # the search result, theirs to read
    turn = reply.metadata["turn"]
    shown = reader.get(f"/api/v1/turns/{turn}").json()["turn"]["reply"]["text"]
    assert f"[{LABEL}]" in shown
    hit = reply_hit(reader, reply)
    assert f"[{LABEL}]" in hit["snippet"] and marker not in hit["snippet"]
    assert [hit["snippet"][a:b].lower() for a, b in hit["highlights"]] == ["rotated"]
    # The search result in the history is found too, its passage theirs to read.
    assert PASSAGE_WORDS in json.dumps([r["snippet"] for r in search(reader)])

    # Another member of the room who may not read the collection (any more).
    other = token_for(member)
    messages = history(other, reply.chat)
    everything = json.dumps(messages, ensure_ascii=False)
    assert HIDDEN in text_of(messages, reply.pk)
    assert "oncall/runbook.md" not in everything and SECTION not in everything
    assert PASSAGE_WORDS not in everything and marker not in everything
    assert "a passage of a collection you may not read" in everything  # the search result
    assert "Remove rotated logs under /var/log" in text_of(messages, reply.pk)  # the chat's
    shown = other.get(f"/api/v1/turns/{turn}").json()["turn"]["reply"]["text"]
    assert HIDDEN in shown and "oncall/runbook.md" not in shown
    hit = reply_hit(other, reply)
    assert HIDDEN in hit["message"]["text"] and HIDDEN in hit["snippet"]
    assert "oncall/runbook.md" not in json.dumps(hit) and marker not in json.dumps(hit)
    assert [hit["snippet"][a:b].lower() for a, b in hit["highlights"]] == ["rotated"]
    # The search result in the history matches the passage's words: found, but no snippet
    # or text of it shows them.
    for words in ("rotated", "du"):
        found = json.dumps(search(other, words), ensure_ascii=False)
        assert PASSAGE_WORDS not in found and "Full disk" not in found

    # An outsider, and another integration (of a reader of the collection who is not in the
    # room): the chat, its turn and its messages are not theirs at all.
    keeper = make_person("keeper")
    collection.readers.add(keeper)
    for api in (token_for(outsider), token_for(keeper)):
        assert api.get(f"/api/v1/chats/{reply.chat.chat_key}/messages").status_code == 404
        assert api.get(f"/api/v1/turns/{turn}").status_code == 404
        found = json.dumps(search(api), ensure_ascii=False)
        assert "oncall/runbook.md" not in found and PASSAGE_WORDS not in found

    # What is stored is unchanged: the reference stays in the database.
    assert marker in Message.objects.get(pk=reply.pk).text


def streamed(turn, person, deltas: list[str]) -> str:
    """The content a /v1 streaming client of `person` puts together from `deltas`."""
    events = [{"type": "turn.delta", "turn_id": turn.pk, "text": d} for d in deltas]
    events.append({"type": "turn.finished", "turn_id": turn.pk})

    async def follow():
        for event in events:
            yield event

    landed = Landed(chat=turn.chat, trigger=turn.trigger, turn=turn)

    async def collect():
        chunks = completions._chunks(landed, follow(), "chatcmpl-x", False, (0, person))
        return [piece async for piece in chunks]

    pieces = [json.loads(p[6:]) for p in async_to_sync(collect)() if p.startswith("data: {")]
    return "".join(c["choices"][0]["delta"].get("content", "") for c in pieces if c["choices"])


def test_the_dashboard_search_shows_a_non_reader_none_of_the_passage(cited, client, owner, member):
    reply, passage, _ = cited
    client.force_login(member)
    page = client.get(reverse("search"), {"q": "rotated"}).content.decode()
    assert "Remove <mark>rotated</mark> logs" in page and HIDDEN in page
    assert PASSAGE_WORDS not in page and "oncall/runbook.md" not in page
    assert f"[K{passage.pk}]" not in page
    client.force_login(owner)
    page = client.get(reverse("search"), {"q": "rotated"}).content.decode()
    assert PASSAGE_WORDS in page and f"[{LABEL}]" in page.replace("&gt;", ">")


def test_the_v1_answer_is_rendered_for_the_person_whose_key_asked(
    fake,  # noqa: F811
    room,  # noqa: F811
    owner,
    member,
):
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, member)
    passage = Passage.objects.get(collection=collection, section=SECTION)
    turn = outcome(reply.metadata["turn"])
    marker = f"[K{passage.pk}]"
    # Streamed as the reply is written: the reference split across two deltas is held,
    # then rendered whole, as the whole answer is.
    head, tail = reply.text.split(marker)
    deltas = [head + marker[:3], marker[3:] + tail]
    shown = answer_of(turn, owner)
    assert f"[{LABEL}]" in shown and marker not in shown
    assert streamed(turn, owner, deltas) == shown

    # marco may no longer read the collection: neither his answer nor his stream names it.
    collection_remove_readers(collection=collection, people=[member], by=owner)
    hidden = answer_of(turn, member)
    assert HIDDEN in hidden and "oncall/runbook.md" not in hidden and marker not in hidden
    assert streamed(turn, member, deltas) == hidden
    assert marker in Message.objects.get(pk=reply.pk).text


def test_an_openai_conversation_continues_after_a_cited_answer(fake, owner):  # noqa: F811
    """The client resends the answer as it got it (rendered): the conversation's tip is that
    text, so the resend continues the chat rather than forking a new one."""

    def request(*items):
        return ConversationRequest(
            items=items, system="", chat_key=None, stream=False, include_usage=False
        )

    question = ("user", "what does our runbook say about a full disk?")
    first = conversation_post(person=owner, request=request(question))
    collection = runbooks(readers=[owner], by=owner)
    collection_turn_on(collection=collection, chat=first.chat, by=None)
    fake.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        cite_first_passage,
    )
    turn = run(first.turn)
    shown = answer_of(outcome(turn.pk), owner)
    assert f"[{LABEL}]" in shown and "[K" not in shown
    second = conversation_post(
        person=owner, request=request(question, ("assistant", shown), ("user", "thanks"))
    )
    assert second.chat == first.chat and second.new
    assert Turn.objects.filter(chat=first.chat).count() == 2


def test_the_api_turn_stream_renders_deltas_and_the_reply_for_its_reader(
    fake,  # noqa: F811
    room,  # noqa: F811
    owner,
    member,
    monkeypatch,
):
    from chats.api import streams
    from chats.payloads import message_payload

    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, member)
    passage = Passage.objects.get(collection=collection, section=SECTION)
    marker = f"[K{passage.pk}]"
    head, tail = reply.text.split(marker)
    turn = reply.metadata["turn"]
    events = [
        {"type": "turn.delta", "turn_id": turn, "seq": 1, "text": head + marker[:2]},
        {"type": "turn.delta", "turn_id": turn, "seq": 2, "text": marker[2:] + tail},
        {"type": "turn.finished", "turn_id": turn, "seq": 3, "message": message_payload(reply)},
    ]

    async def follow(*args):
        for event in events:
            yield event

    monkeypatch.setattr(streams, "follow_turn", follow)

    def sent(person) -> tuple[str, str]:
        async def collect():
            return [p async for p in streams._stream(room.pk, turn, 0, person)]

        lines = [line for p in async_to_sync(collect)() for line in p.splitlines()]
        data = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        deltas = "".join(e["text"] for e in data if e["type"] == "turn.delta")
        return deltas, data[-1]["message"]["text"]

    deltas, final = sent(owner)
    assert f"[{LABEL}]" in deltas and marker not in deltas
    assert f"[{LABEL}](/knowledge/" in final and marker not in final
    collection_remove_readers(collection=collection, people=[member], by=owner)
    deltas, final = sent(member)
    assert HIDDEN in deltas and HIDDEN in final
    assert "oncall/runbook.md" not in deltas + final and marker not in deltas + final
    assert marker in Message.objects.get(pk=reply.pk).text
