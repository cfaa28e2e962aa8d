"""Team knowledge on Telegram, end to end (the real bot process against the fake Bot API,
a Celery worker, the fake model): in a group with a member who may not read a restricted
collection, nothing of it reaches the model or the group, even with the collection forced
on there and the model citing one of its passages by id; a collection everyone may read is
searched there and its citation reads "document § section"."""

import json

import pytest

from chats.models import Chat
from knowledge.citations import HIDDEN
from knowledge.models import ChatCollection, Passage
from tests.bots.conftest import GROUP_ID
from tests.bots.test_end_to_end import MENTION, final_text, replies_done, wait
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import group_chat, tg_user
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
    # Forced on (turning a restricted collection on in a Telegram group is refused).
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
