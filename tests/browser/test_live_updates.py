"""Stop, reconnect and access rules of the live chat page, in Chromium."""

import re
import threading

from playwright.sync_api import expect

from chats.agent import events
from chats.agent.turns import message_received
from chats.models import ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.browser.conftest import composer_fill
from tests.fakes import openai_server as fake_openai


def room_with(*people, title="Ops room"):
    chat, _ = chat_get_or_create(channel="web", chat_id=f"r-{title}", kind="room", title=title)
    for index, person in enumerate(people):
        role = ChatMember.Role.OWNER if index == 0 else ChatMember.Role.MEMBER
        chat_member_ensure(chat=chat, person=person, role=role)
    return chat


def open_room(page, chat):
    page.goto(f"/chats/{chat.chat_key}/")
    expect(page.locator("h1")).to_have_text(chat.title)


def send(page, text):
    composer_fill(page, text)
    page.keyboard.press("Enter")


def test_stop_interrupts_a_slow_reply(page_for, make_person, fake_llm):
    alice = make_person("alice")
    chat = room_with(alice)
    fake_llm.script(fake_openai.text("slowly " * 300, delay=0.05))
    page = page_for(alice)
    open_room(page, chat)
    send(page, "tell me everything")
    streaming = page.locator("article.is-streaming")
    expect(streaming.locator(".body")).to_contain_text("slowly slowly", timeout=15_000)
    expect(streaming.locator(".typing")).to_be_visible()
    page.click("article.is-streaming button.stop")
    expect(page.locator("article.is-interrupted")).to_have_count(1, timeout=10_000)
    expect(page.locator("article.is-interrupted")).to_contain_text("interrupted")
    turn = Turn.objects.get()
    assert turn.status == "interrupted" and turn.interrupt_reason == "stopped by alice"
    partial = Message.objects.get(pk=turn.reply_id)
    assert partial.metadata["interrupted"] and len(partial.text) < len("slowly " * 300)


def test_a_dropped_connection_catches_up_and_shows_the_reply_exactly_once(
    page_for, make_person, fake_llm, live_stack
):
    alice = make_person("alice")
    chat = room_with(alice)
    words = [f"w{index}" for index in range(60)]
    fake_llm.script(fake_openai.text(" ".join(words), delay=0.08))
    page = page_for(alice)
    open_room(page, chat)
    send(page, "count to sixty")
    expect(page.locator("article.is-streaming .body")).to_contain_text("w5", timeout=15_000)
    live_stack.restart_web()  # every WebSocket drops mid-reply; the worker keeps streaming
    reply = " ".join(words)
    expect(page.locator("article.message-assistant")).to_contain_text(reply, timeout=30_000)
    expect(page.locator("article.message-assistant")).to_have_count(1)
    expect(page.locator("article.is-streaming")).to_have_count(0)
    expect(page.locator("article.message-user")).to_have_count(1)
    assert Message.objects.get(role="assistant").text == reply


def test_an_outsider_gets_404_for_the_room_and_its_websocket(page_for, make_person, live_stack):
    alice, oscar = make_person("alice"), make_person("oscar")
    chat = room_with(alice, title="Private")
    page = page_for(oscar)
    response = page.goto(f"/chats/{chat.chat_key}/")
    assert response.status == 404
    expect(page.get_by_text("Private")).to_have_count(0)
    page.goto("/")
    code = page.evaluate(
        """path => new Promise(resolve => {
            const socket = new WebSocket("ws://" + location.host + path);
            socket.addEventListener("close", event => resolve(event.code));
        })""",
        f"/ws/chats/{chat.chat_key}/",
    )
    assert code == 4404


def test_older_messages_load_when_scrolling_up(page_for, make_person):
    alice = make_person("alice")
    chat = room_with(alice, title="Long room")
    for index in range(120):
        message_ingest(
            channel="web", chat_id=chat.external_id, user_id="alice", text=f"note {index}"
        )
    page = page_for(alice)
    open_room(page, chat)
    expect(page.locator("article.message-user")).to_have_count(50)
    expect(page.locator("#messages")).to_contain_text("note 119")
    page.locator("#messages").evaluate("list => { list.scrollTop = 0; }")
    expect(page.locator("article.message-user")).to_have_count(100, timeout=10_000)
    page.locator("#messages").evaluate("list => { list.scrollTop = 0; }")
    expect(page.locator("article.message-user")).to_have_count(120, timeout=10_000)
    expect(page.locator("#messages")).to_contain_text("note 0")


def in_thread(target, *args, **kwargs):
    """`target(...)` in a thread of its own: Playwright's event loop runs in the test's, where
    Django's async guard refuses database calls and channels' async_to_sync."""
    result = []
    worker = threading.Thread(target=lambda: result.append(target(*args, **kwargs)))
    worker.start()
    worker.join()
    return result[0] if result else None


def announce_update(chat, message) -> None:
    in_thread(events.publish, chat.pk, "message.updated", message={"id": message.pk})


def wait_for_fetches(page, held: list, count: int) -> None:
    """Until the page's held fetches of the message number `count`."""
    for _ in range(600):
        if len(held) >= count:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"the page fetched the message {len(held)} times, not {count}")


def test_quick_updates_of_a_message_show_its_latest_state(page_for, make_person):
    """Two `message.updated` in quick succession (a transcript's progress, then its end):
    the answer to the first fetch may arrive first and replace the message; the second
    fetch's answer must still be applied (it once held the replaced element and was dropped,
    leaving a voice note "transcribing…" forever). An older answer arriving last is ignored."""
    alice = make_person("alice")
    chat = room_with(alice, title="Updates room")
    message = message_ingest(
        channel="web", chat_id=chat.external_id, user_id="alice", text="state one"
    ).message
    page = page_for(alice)
    open_room(page, chat)
    shown = page.locator(f"#message-{message.pk}")
    expect(shown).to_contain_text("state one")

    held = []  # (route, the answer fetched while the message said what it said then)
    page.route(
        re.compile(rf"/messages/{message.pk}$"), lambda route: held.append((route, route.fetch()))
    )

    for order in ("first answer first", "last answer first"):
        Message.objects.filter(pk=message.pk).update(text=f"old {order}")
        announce_update(chat, message)
        wait_for_fetches(page, held, 1)
        Message.objects.filter(pk=message.pk).update(text=f"new {order}")
        announce_update(chat, message)
        wait_for_fetches(page, held, 2)
        (older, older_answer), (newer, newer_answer) = held
        answers = [(older, older_answer), (newer, newer_answer)]
        if order == "last answer first":
            answers.reverse()
        for route, answer in answers:
            route.fulfill(response=answer)
            page.wait_for_timeout(200)
        expect(shown).to_contain_text(f"new {order}")
        page.wait_for_timeout(300)
        expect(shown).to_contain_text(f"new {order}")
        held.clear()


def test_an_update_before_the_message_is_shown_is_not_lost(page_for, make_person):
    """A message's `message.updated` can come while the page is still fetching the message
    itself (or while the upload that sent it is still answering): the HTML then placed was
    rendered before the change, so the page fetches the message again once it is shown."""

    alice = make_person("alice")
    chat = room_with(alice, title="Early update room")
    page = page_for(alice)
    open_room(page, chat)
    held = []

    def hold_first(route):
        if held:
            route.continue_()
        else:
            held.append((route, route.fetch()))  # answered later, as it was rendered now

    page.route(re.compile(r"/messages/\d+$"), hold_first)

    def post():
        stored = message_ingest(
            channel="web", chat_id=chat.external_id, user_id="alice", text="before"
        )
        message_received(stored, respond=False)  # announced: message.created
        return stored.message

    message = in_thread(post)
    wait_for_fetches(page, held, 1)
    Message.objects.filter(pk=message.pk).update(text="after the change")
    announce_update(chat, message)
    page.wait_for_timeout(300)  # the update reached the page before the message did
    route, answer = held[0]
    route.fulfill(response=answer)
    expect(page.locator(f"#message-{message.pk}")).to_contain_text("after the change")
