"""Citations through the engine: the fake model (real HTTP) calls `knowledge_search`, then
answers citing the passage it got as `[K<id>]`. The stored reply keeps the citation; the
dashboard links it to the viewer at that passage for readers only ("[citation hidden]" for
anyone else, and for references to passages the chat could not use); a document changed
since the answer says so; Telegram's text names document and section."""

import hashlib
import json

import pytest
from django.urls import reverse

from chats.agent.turns import message_received
from chats.models import ChatMember, Message
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from knowledge.citations import HIDDEN, citations_outbound_text
from knowledge.indexing import document_store_text
from knowledge.models import Citation, Passage
from knowledge.services import (
    collection_remove_readers,
    collection_turn_off,
    collection_turn_on,
)
from knowledge.vectors import forget
from tests.fakes import openai_server as fake_openai
from tests.knowledge.helpers import RUNBOOK, runbooks
from tests.turns import run

pytestmark = pytest.mark.django_db(transaction=True)

SECTION = "On-call runbook › Disk › Full disk"


@pytest.fixture
def fake(settings):
    forget()
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0, LLM_CONTEXT_TOKENS=16000)
        yield server
    forget()


@pytest.fixture
def room(owner, member):
    chat, _ = chat_get_or_create(channel="web", chat_id="ops-room", title="Ops")
    chat_member_ensure(chat=chat, person=owner, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=chat, person=member)
    return chat


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


def cite_first_passage(body: dict):
    """The model's answer: it cites the first passage the tool gave it."""
    content = next(m["content"] for m in body["messages"] if m.get("tool_call_id") == "k1")
    first = json.loads(content)["passages"][0]
    return fake_openai.text(f"Remove rotated logs under /var/log [{first['ref']}].")


def article(page: str, message: Message) -> str:
    """The HTML of one message on the chat page."""
    return page.split(f'id="message-{message.pk}"')[1].split("</article>")[0]


def ask(fake, chat, person) -> Message:
    fake.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        cite_first_passage,
    )
    turn = run(say(chat, person, "what does our runbook say about a full disk?"))
    return turn.reply


def test_the_answer_cites_the_right_section_and_the_link_opens_the_viewer(
    fake, client, owner, member, room
):
    collection = runbooks(readers=[owner, member])
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, member)
    passage = Passage.objects.get(collection=collection, section=SECTION)
    assert f"[K{passage.pk}]" in reply.text
    citation = Citation.objects.get(message=reply)
    assert citation.passage_id == passage.pk and citation.section == SECTION

    client.force_login(member)
    page = client.get(reverse("chat_page", args=[room.chat_key])).content.decode()
    link = reverse("knowledge_document", args=[collection.pk, passage.document_id])
    assert f'href="{link}#K{passage.pk}"' in page
    assert f"[oncall/runbook.md § {SECTION}]" in page
    assert f"[K{passage.pk}]" not in article(page, reply)
    viewer = client.get(link).content.decode()
    assert f'id="K{passage.pk}"' in viewer and "rotated logs under /var/log" in viewer
    # Telegram's text: document § section, no link.
    assert f"(oncall/runbook.md § {SECTION})" in citations_outbound_text(reply, reply.text)


def test_a_reader_removed_later_sees_the_citation_hidden(fake, client, owner, member, room):
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, owner)
    collection_remove_readers(collection=collection, people=[member], by=owner)
    client.force_login(member)
    page = client.get(reverse("chat_page", args=[room.chat_key])).content.decode()
    assert HIDDEN in page
    assert "/doc/" not in article(page, reply)
    # The search's stored result is shown without the passages they may no longer read.
    assert "§ On-call runbook" not in page and "rotated logs under" not in page.replace(
        "Remove rotated logs under /var/log", ""
    )
    assert "a passage of a collection you may not read" in page
    client.force_login(owner)
    page = client.get(reverse("chat_page", args=[room.chat_key])).content.decode()
    assert "§ On-call runbook" in page and f"[oncall/runbook.md § {SECTION}]" in page
    client.force_login(member)
    # The one message alone (as live updates fetch it) hides it too.
    one = client.get(reverse("chat_message", args=[room.chat_key, reply.pk])).content.decode()
    assert HIDDEN in one and "doc/" not in one
    # The chat no longer passes the readers rule: Telegram's text hides it as well.
    assert HIDDEN in citations_outbound_text(reply, reply.text)


def test_a_document_changed_since_the_answer_says_so(fake, client, owner, member, room):
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, owner)
    client.force_login(owner)
    page = client.get(reverse("chat_page", args=[room.chat_key])).content.decode()
    assert "changed since" not in page
    document = collection.documents.get()
    changed = RUNBOOK.replace("expand the volume", "call the storage team")
    document_store_text(
        document=document,
        text=changed,
        paged=False,
        media_type="text/markdown",
        page_count=1,
        content_hash=hashlib.sha256(changed.encode()).hexdigest(),
        size=len(changed),
    )
    page = client.get(reverse("chat_page", args=[room.chat_key])).content.decode()
    assert "changed since" in page
    # The old passage is gone; the link still opens the document, which says so.
    cited = Citation.objects.get(message=reply)
    assert not Passage.objects.filter(pk=cited.passage_id).exists()
    viewer = client.get(reverse("knowledge_document", args=[collection.pk, document.pk]))
    assert b'id="cited-gone"' in viewer.content
    assert "changed since" in citations_outbound_text(reply, reply.text)


def test_a_reference_the_chat_could_not_use_is_hidden_even_from_its_readers(
    fake, client, owner, member, room, make_person
):
    usable = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=usable, chat=room, by=owner)
    # Another collection owner reads, not on in this room: the model names one of its ids.
    other = runbooks(readers=[owner], name="Other", by=make_person("keeper"))
    foreign = Passage.objects.filter(collection=other).first()
    fake.script(fake_openai.text(f"See [K{foreign.pk}] and [K999999999]."))
    reply = run(say(room, owner, "anything?")).reply
    assert not Citation.objects.filter(message=reply).exists()
    client.force_login(owner)
    page = client.get(reverse("chat_page", args=[room.chat_key])).content.decode()
    shown = article(page, reply)
    assert shown.count(HIDDEN) == 2 and "/doc/" not in shown
    assert citations_outbound_text(reply, reply.text) == f"See {HIDDEN} and {HIDDEN}."


def test_a_later_joiner_who_may_not_read_it_reads_none_of_it_in_the_history(
    fake, client, owner, member, outsider, room
):
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, member)
    # While it is on, the join is refused (knowledge.signals); turned off, oscar may join.
    collection_turn_off(collection=collection, chat=room, by=owner)
    chat_member_ensure(chat=room, person=outsider)
    client.force_login(outsider)
    page = client.get(reverse("chat_page", args=[room.chat_key])).content.decode()
    assert HIDDEN in article(page, reply)
    assert "§ On-call runbook" not in page and "/doc/" not in page
    assert "a passage of a collection you may not read" in page
    assert "Remove rotated logs under /var/log" in page  # the answer itself is the chat's
