"""Team knowledge on Telegram, end to end (the real bot process against the fake Bot API,
a Celery worker, the fake model): in a group with a member who may not read a restricted
collection, nothing of it reaches the model or the group, even with the collection forced
on there and the model citing one of its passages by id; a collection everyone may read is
searched there and its citation reads "document § section". In private chats: the reader's
gets the restricted collection (tool, prompt block, citation "document § section"); a
non-reader's gets nothing of it, even forced on and cited by id."""

import json

import pytest
from django.core.exceptions import PermissionDenied

from chats.models import Channel, Chat
from chats.services import actor_get_or_create, actor_link
from knowledge.citations import HIDDEN
from knowledge.models import ChatCollection, Citation, Passage
from knowledge.prompt import HEADER
from knowledge.services import collection_turn_on
from tests.bots.conftest import GROUP_ID
from tests.bots.test_end_to_end import MENTION, final_text, replies_done, wait
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import group_chat, private_chat, tg_user
from tests.knowledge.helpers import runbooks

pytestmark = pytest.mark.timeout(240)

ALICE = tg_user(1001, "Alice", username="alice")
BOB = tg_user(1002, "Bob")
SECTION = "On-call runbook › Disk › Full disk"


def test_a_group_with_a_non_reader_gets_nothing_from_a_restricted_collection(
    telegram_live, make_person
):
    tg, llm = telegram_live.tg, telegram_live.llm
    keeper = make_person("keeper")
    restricted = runbooks(readers=[keeper], by=keeper, name="Runbooks")
    open_to_all = runbooks(everyone=True, name="Handbook")
    secret = Passage.objects.get(collection=restricted, section=SECTION)
    shared = Passage.objects.get(collection=open_to_all, section=SECTION)
    seen = {}

    def answer(body):
        content = next(m["content"] for m in body["messages"] if m.get("tool_call_id") == "k1")
        seen["result"] = json.loads(content)
        refs = " ".join(f"[{p['ref']}]" for p in seen["result"]["passages"][:1])
        # The model also names the restricted passage's id, as if it had guessed it.
        return fake_openai.text(f"Remove rotated logs {refs} [K{secret.pk}].")

    group = group_chat(GROUP_ID, "Ops")
    tg.send(group, BOB, "morning")
    chat = wait(
        lambda: Chat.objects.filter(chat_key=f"telegram:{GROUP_ID}").first(), 30, "the group"
    )
    # Turning a restricted collection on in a Telegram group is refused (the operator's
    # command and the pages go through this service); forced on anyway.
    with pytest.raises(PermissionDenied, match="Telegram group"):
        collection_turn_on(collection=restricted, chat=chat, by=None)
    ChatCollection.objects.create(chat=chat, collection=restricted)
    ChatCollection.objects.create(chat=chat, collection=open_to_all)
    llm.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        answer,
    )
    tg.send(group, ALICE, f"{MENTION} what does the runbook say about a full disk?")
    wait(replies_done(1), 90, "the reply")

    assert seen["result"]["collections"] == ["Handbook"]
    assert {p["collection"] for p in seen["result"]["passages"]} == {"Handbook"}
    prompts = json.dumps(llm.requests, ensure_ascii=False)
    assert f"K{secret.pk}]" not in prompts.replace(f"[K{secret.pk}].", "")
    text = final_text(tg.bot_messages(GROUP_ID)[-1])
    assert f"(oncall/runbook.md § {SECTION})" in text
    assert HIDDEN in text and f"K{secret.pk}" not in text and f"K{shared.pk}" not in text


RUNBOOK_WORDS = "rotated logs under /var/log"  # words of the cited passage's own text


def _link(user, person):
    actor = actor_get_or_create(
        channel=Channel.TELEGRAM, user_id=user["id"], display_name=user["first_name"]
    )
    actor_link(actor=actor, person=person)


def _ask_in_private(telegram_live, user, seen: dict, *, cite: str, count: int):
    """`user` asks in their private chat; the model searches, then answers citing the first
    passage it got and `cite` (a reference it names as if it had guessed it). The turn's
    model requests and the tool's result are kept in `seen`."""
    tg, llm = telegram_live.tg, telegram_live.llm
    before = len(llm.requests)

    def answer(body):
        content = next(m["content"] for m in body["messages"] if m.get("tool_call_id") == "k1")
        seen["result"] = json.loads(content)
        refs = " ".join(f"[{p['ref']}]" for p in seen["result"]["passages"][:1])
        return fake_openai.text(f"Remove rotated logs {refs} {cite}.")

    llm.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        answer,
    )
    tg.send(private_chat(user), user, "what does the runbook say about a full disk?")
    wait(replies_done(count), 90, "the reply")
    seen["requests"] = llm.requests[before:]
    return final_text(tg.bot_messages(user["id"])[-1])


def test_a_private_chat_gets_a_restricted_collection_only_for_its_reader(
    telegram_live, make_person
):
    tg, llm = telegram_live.tg, telegram_live.llm
    keeper, outsider = make_person("keeper"), make_person("outsider")
    _link(ALICE, keeper)
    _link(BOB, outsider)
    restricted = runbooks(readers=[keeper], by=keeper, name="Runbooks")
    secret = Passage.objects.get(collection=restricted, section=SECTION)
    llm.default = fake_openai.echo("re: ")
    for user in (ALICE, BOB):
        tg.send(private_chat(user), user, "hello")
    wait(replies_done(2), 60, "the greetings answered")
    alice = Chat.objects.get(chat_key=f"telegram:{ALICE['id']}")
    bob = Chat.objects.get(chat_key=f"telegram:{BOB['id']}")
    # The operator's `knowledge enable` (this service): on in the reader's private chat,
    # refused in the non-reader's, which gets it forced on anyway.
    collection_turn_on(collection=restricted, chat=alice, by=None)
    with pytest.raises(PermissionDenied, match="may read Runbooks"):
        collection_turn_on(collection=restricted, chat=bob, by=None)
    ChatCollection.objects.create(chat=bob, collection=restricted)

    seen = {}
    text = _ask_in_private(telegram_live, ALICE, seen, cite="", count=3)
    assert seen["result"]["collections"] == ["Runbooks"]
    assert seen["result"]["passages"][0]["ref"] == f"K{secret.pk}"
    first = json.dumps(seen["requests"][0], ensure_ascii=False)
    assert HEADER.splitlines()[0] in first and RUNBOOK_WORDS in first  # the prompt block
    assert f"(oncall/runbook.md § {SECTION})" in text and HIDDEN not in text
    assert Citation.objects.filter(message__chat=alice, passage_id=secret.pk).exists()

    seen = {}
    text = _ask_in_private(telegram_live, BOB, seen, cite=f"[K{secret.pk}]", count=4)
    assert seen["result"]["passages"] == [] and "collections" not in seen["result"]
    prompts = json.dumps(seen["requests"], ensure_ascii=False)
    assert HEADER.splitlines()[0] not in prompts  # no prompt block
    assert RUNBOOK_WORDS not in prompts and "du -xh" not in prompts  # no passage, anywhere
    assert HIDDEN in text and "oncall/runbook.md" not in text and f"K{secret.pk}" not in text
    assert not Citation.objects.filter(message__chat=bob).exists()
