"""Stop, reconnect and access rules of the live chat page, in Chromium."""

from playwright.sync_api import expect

from chats.models import ChatMember, Message, Turn
from chats.services import chat_get_or_create, chat_member_ensure
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
    from chats.services import message_ingest

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
