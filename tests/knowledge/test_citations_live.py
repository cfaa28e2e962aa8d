"""Citations in the dashboard's live stream: a reply's streamed pieces reach each open page
rendered for that page's person, through the real ASGI application and Redis. A reader of
the collection sees "[document § section]"; once a member may no longer read it (the
collection is then off in the room: a restricted collection is on only where every member
reads it) every page shows "[citation hidden]"; no page ever sees the bare `[K<id>]`
reference, even when it is split across two pieces."""

import pytest
from asgiref.sync import async_to_sync

from knowledge.citations import HIDDEN
from knowledge.models import Passage
from knowledge.services import collection_remove_readers, collection_turn_on
from tests.chats.test_consumers import TIMEOUT, publish, session_headers, socket
from tests.knowledge.helpers import runbooks
from tests.knowledge.test_citations import SECTION, ask, fake, room  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

LABEL = f"oncall/runbook.md § {SECTION}"


def test_each_open_page_streams_the_citation_as_its_person_reads_it(fake, room, owner, member):  # noqa: F811
    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, member)
    passage = Passage.objects.get(collection=collection, section=SECTION)
    marker = f"[K{passage.pk}]"
    pieces = ["See the runbook ", marker[:2], marker[2:] + " and the ", "end [K"]
    headers = {person: session_headers(person) for person in (owner, member)}

    def stream(turn: int) -> dict:
        async def body():
            sockets = {person: socket(room.chat_key, headers[person]) for person in headers}
            for communicator in sockets.values():
                connected, _ = await communicator.connect(timeout=TIMEOUT)
                assert connected
            for piece in pieces:
                await publish(room.pk, "turn.delta", turn_id=turn, text=piece)
            await publish(room.pk, "turn.finished", turn_id=turn)
            streamed = {}
            for person, communicator in sockets.items():
                texts = []
                while True:
                    event = await communicator.receive_json_from(timeout=TIMEOUT)
                    if event["type"] == "turn.finished" and event["turn_id"] == turn:
                        break
                    if event["type"] == "turn.delta" and event["turn_id"] == turn:
                        texts.append(event["text"])
                # Every piece is sent, the one holding only the reference's start as "".
                assert len(texts) == len(pieces)
                streamed[person] = "".join(texts)
                await communicator.disconnect()
            return streamed

        return async_to_sync(body)()

    # Turns of their own, so no event of the one asked above mixes in.
    both_read = stream(10_000 + reply.pk)
    assert both_read[owner] == both_read[member] == f"See the runbook [{LABEL}] and the end "
    collection_remove_readers(collection=collection, people=[member], by=owner)
    one_reads = stream(20_000 + reply.pk)
    assert one_reads[owner] == one_reads[member] == f"See the runbook {HIDDEN} and the end "
    assert "[K" not in "".join(both_read.values()) + "".join(one_reads.values())


def test_telegram_previews_of_a_streamed_reply_never_show_a_bare_reference(
    fake,  # noqa: F811
    room,  # noqa: F811
    owner,
    member,
):
    """A Telegram reply's previews (sent, then edited while the model writes) show a citation
    as the final message will: "(document § section)" where the chat may use the collection,
    "[citation hidden]" once it may not; a reference not finished yet is left out."""
    from types import SimpleNamespace

    from bots.delivery import ChatGate, ReplyDelivery
    from bots.models import OutboundMessage

    collection = runbooks(readers=[owner, member], by=owner)
    collection_turn_on(collection=collection, chat=room, by=owner)
    reply = ask(fake, room, member)
    passage = Passage.objects.get(collection=collection, section=SECTION)
    marker = f"[K{passage.pk}]"
    row = OutboundMessage.objects.create(
        kind="reply", turn_id=reply.metadata["turn"], chat=room, telegram_chat_id=555
    )
    shown = []

    async def send_message(*, text, **kwargs):
        shown.append(text)
        return SimpleNamespace(message_id=77)

    async def edit_message_text(*, text, **kwargs):
        shown.append(text)

    bot = SimpleNamespace(send_message=send_message, edit_message_text=edit_message_text)
    delivery = ReplyDelivery(SimpleNamespace(bot=bot, gate=ChatGate()), row, None)

    def preview(text: str) -> str:
        delivery.text = text
        async_to_sync(delivery._preview)()
        return shown[-1]

    assert preview("See the runbook [K") == "See the runbook"
    assert preview(f"See the runbook {marker[:-1]}") == "See the runbook"
    assert preview(f"See the runbook {marker} now") == f"See the runbook ({LABEL}) now"
    collection_remove_readers(collection=collection, people=[member], by=owner)
    assert preview(f"See the runbook {marker} now.") == f"See the runbook {HIDDEN} now."
    assert not any("[K" in text for text in shown)


def test_the_terminal_prints_a_citation_as_its_person_reads_it(fake, owner):  # noqa: F811
    """`manage.py chat --user NAME` streams the reply into the terminal and never prints it
    again: the streamed text itself renders the reference for that person."""
    import io

    from django.core.management import call_command

    from knowledge.models import Collection
    from tests.fakes import openai_server as fake_openai
    from tests.knowledge.test_citations import cite_first_passage

    collection = runbooks(everyone=True, by=owner)
    Collection.objects.filter(pk=collection.pk).update(team_default=True)
    fake.script(
        fake_openai.tool_calls([("k1", "knowledge_search", {"query": "disk is full"})]),
        cite_first_passage,
    )
    out = io.StringIO()
    call_command(
        "chat", "-m", "what about a full disk?", "--profile", "ops", "--user",
        owner.get_username(), stdout=out,
    )  # fmt: skip
    printed = out.getvalue()
    assert f"Remove rotated logs under /var/log [{LABEL}]." in printed
    assert "[K" not in printed
