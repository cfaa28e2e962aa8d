"""The Telegram bridge end to end: the real bot process (python-telegram-bot against a fake
Bot API server speaking real HTTP), a real Celery worker, the fake model server, Redis and
the test database. Every assertion is about what a Telegram user would see."""

import re
import time

import pytest

from attachments.models import Attachment
from bots.models import OutboundMessage, ProcessedUpdate
from chats.models import Chat, Message, Turn, TurnHold
from tests.attachments.conftest import png_bytes
from tests.bots.conftest import FORUM_ID, GROUP_ID
from tests.fakes import openai_server as fake_openai
from tests.fakes.telegram_server import check_html, group_chat, private_chat, tg_user, utf16_len

pytestmark = pytest.mark.timeout(240)

ALICE = tg_user(1001, "Alice", username="alice")
BOB = tg_user(1002, "Bob")
CARA = tg_user(1003, "Cara")
MENTION = "@hermes_test_bot"
REJECTED_HTML = 'Bad Request: can\'t parse entities: Unsupported start tag "b" at byte offset 0'


def wait(predicate, timeout=30.0, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    open_rows = [
        (r.pk, r.status, r.turn.status if r.turn else None, r.message_ids, r.error[:80])
        for r in OutboundMessage.objects.exclude(status="delivered").select_related("turn")
    ]
    raise AssertionError(f"timed out waiting for {what or predicate}; open outbox: {open_rows}")


def replies_done(count: int | None = None):
    """All reply rows delivered (and at least `count` of them)."""

    def check():
        rows = OutboundMessage.objects.filter(kind="reply")
        total = rows.count()
        return (count is None or total >= count) and not rows.exclude(status="delivered").exists()

    return check


def final_text(message) -> str:
    """What the user reads: the visible text of the last version of a bot message."""
    if message.parse_mode == "HTML":
        return check_html(message.text)[1]
    return message.text


def test_private_chat_group_and_forum_topics_map_and_reply_in_place(telegram_live):
    tg, llm = telegram_live.tg, telegram_live.llm
    llm.default = fake_openai.echo("re: ")

    tg.send(private_chat(ALICE), ALICE, "hello from a private chat")
    group = group_chat(GROUP_ID, "Ops")
    tg.send(group, ALICE, "morning all")
    tg.send(group, BOB, "morning")
    asked = tg.send(group, CARA, f"{MENTION} what is on today?")
    forum = group_chat(FORUM_ID, "Eng", forum=True)
    tg.send(forum, ALICE, f"{MENTION} infra question", thread_id=5, topic_name="Infra")
    tg.send(forum, BOB, f"{MENTION} release question", thread_id=9, topic_name="Releases")

    wait(replies_done(4), 60, "four replies")
    dm = tg.bot_messages(1001)
    assert [final_text(m) for m in dm] == ["re: hello from a private chat"]
    in_group = tg.bot_messages(GROUP_ID)
    assert [final_text(m) for m in in_group] == [f"re: [Cara] {MENTION} what is on today?"]
    assert in_group[0].reply_to == asked["message"]["message_id"] and in_group[0].thread_id is None
    infra, releases = tg.bot_messages(FORUM_ID, 5), tg.bot_messages(FORUM_ID, 9)
    assert [final_text(m) for m in infra] == [f"re: [Alice] {MENTION} infra question"]
    assert [final_text(m) for m in releases] == [f"re: [Bob] {MENTION} release question"]
    assert len(tg.bot_messages(FORUM_ID)) == 2  # nothing landed outside its topic
    # Typing indicators went to the topic too.
    typing = [c.params for c in tg.calls_of("sendChatAction") if c.params["chat_id"] == FORUM_ID]
    assert typing and {p.get("message_thread_id") for p in typing} <= {5, 9}

    shared = Chat.objects.get(chat_key=f"telegram:{GROUP_ID}")
    users = shared.messages.filter(role="user").order_by("id")
    assert [(m.actor.display_name, m.actor.external_id) for m in users] == [
        ("Alice", "1001"),
        ("Bob", "1002"),
        ("Cara", "1003"),
    ]
    assert shared.messages.filter(role="assistant").count() == 1
    # The model saw the whole group conversation, each line with its author.
    prompt = next(r for r in llm.requests if "what is on today" in fake_openai.last_user_text(r))
    history = [m["content"] for m in prompt["messages"] if m["role"] == "user"]
    assert history == [
        "[Alice] morning all",
        "[Bob] morning",
        f"[Cara] {MENTION} what is on today?",
    ]
    assert Chat.objects.filter(chat_key__startswith=f"telegram:{FORUM_ID}:topic:").count() == 2
    # Each delivered reply records the Telegram message ids it used.
    for row in OutboundMessage.objects.filter(kind="reply"):
        assert row.message_ids and row.text.startswith("re: ")


def by_prompt(routes: dict, default=None):
    """A model reply chosen by a word of the last user message (chats run concurrently)."""

    def reply(body):
        text = fake_openai.last_user_text(body)
        for word, answer in routes.items():
            if word in text:
                return answer(text) if callable(answer) else answer
        return default(body) if default else fake_openai.text(f"re: {text}")

    return reply


def getupdates_after(tg, count: int) -> None:
    """Wait until the bot has polled `count` more times (so it saw everything queued)."""
    start = len(tg.calls_of("getUpdates"))
    wait(lambda: len(tg.calls_of("getUpdates")) >= start + count, 30, "polling")


def test_a_redelivered_update_and_a_restart_mid_burst_store_and_answer_once(telegram_live):
    tg, bot = telegram_live.tg, telegram_live.bot
    telegram_live.llm.default = fake_openai.echo("re: ")

    first = tg.send(private_chat(ALICE), ALICE, "once please")
    wait(replies_done(1), what="the first reply")
    tg.redeliver(first)  # a lost confirmation: Telegram sends the same update again
    wait(lambda: tg.pending_updates() == 0)
    getupdates_after(tg, 2)
    assert Message.objects.filter(text="once please").count() == 1
    assert [final_text(m) for m in tg.bot_messages(1001)] == ["re: once please"]
    assert ProcessedUpdate.objects.filter(update_id=first["update_id"]).count() == 1

    # Replies start two seconds after each question, so the crash below lands while the
    # burst is being stored and turned into turns (a crash mid-reply has its own test).
    telegram_live.llm.default = lambda body: fake_openai.text(
        f"re: {fake_openai.last_user_text(body)}", delay=2.0, chunk_size=1000
    )
    users = [tg_user(2001 + i, f"User {i}") for i in range(10)]
    burst = [tg.send(private_chat(user), user, f"burst {i}") for i, user in enumerate(users)]
    wait(lambda: Message.objects.filter(text__startswith="burst").count() >= 3, what="a start")
    bot.kill()  # in the middle of the burst
    for update in burst:
        tg.redeliver(update)  # and every confirmation was lost
    polls_before = len(tg.calls_of("getUpdates"))
    bot.start()

    wait(replies_done(11), 90, "every burst reply")
    wait(lambda: tg.pending_updates() == 0)
    getupdates_after(tg, 2)
    for i, user in enumerate(users):
        assert Message.objects.filter(text=f"burst {i}").count() == 1
        assert [final_text(m) for m in tg.bot_messages(user["id"])] == [f"re: burst {i}"]
    assert Turn.objects.count() == 11
    # The new process continued from the persisted offset, not from the beginning.
    restarted = tg.calls_of("getUpdates")[polls_before]
    assert restarted.params.get("offset", 0) > first["update_id"]


def test_a_bot_killed_mid_stream_finishes_the_same_message_after_restart(telegram_live):
    tg, bot = telegram_live.tg, telegram_live.bot
    story = " ".join(f"word{i}" for i in range(80))
    telegram_live.llm.default = by_prompt({"story": fake_openai.text(story, delay=0.05)})

    tg.send(private_chat(BOB), BOB, "a story please")
    wait(lambda: tg.bot_messages(1002), what="the streamed message")
    # Killed once the streamed message's id is recorded (before that, see docs/TELEGRAM.md:
    # the one window no bot can close).
    wait(lambda: OutboundMessage.objects.filter(kind="reply").exclude(message_ids=[]).exists())
    bot.kill()
    bot.start()

    wait(replies_done(1), 60, "the reply")
    messages = tg.bot_messages(1002)
    assert len(messages) == 1, [m.text for m in messages]
    assert final_text(messages[0]) == story
    row = OutboundMessage.objects.get(kind="reply")
    assert row.message_ids == [messages[0].message_id] and row.status == "delivered"


def test_a_long_reply_is_split_with_intact_code_fences(telegram_live):
    tg = telegram_live.tg
    lines = [f"value_{i} = compute({i})  # step {i} of the pipeline" for i in range(170)]
    prose = " ".join(f"Sentence {i} explains the setup." for i in range(60))
    reply = "Here is the script:\n\n```python\n" + "\n".join(lines) + f"\n```\n\n{prose}"
    assert len(reply) > 10_000
    telegram_live.llm.default = by_prompt({"script": fake_openai.text(reply, chunk_size=400)})

    tg.send(private_chat(ALICE), ALICE, "the script please")
    wait(replies_done(1), 60, "the reply")
    parts = tg.bot_messages(1001)
    assert len(parts) >= 3
    visible = []
    for part in parts:
        error, text = check_html(part.text)
        assert part.parse_mode == "HTML" and error is None
        assert utf16_len(text) <= 4096
        visible.append(text)
    with_code = [p.text for p in parts if "compute(" in p.text]
    assert len(with_code) >= 2  # the code block crosses a split
    for html in with_code:  # every part opens and closes its own fence, same language
        assert html.count('<pre><code class="language-python">') == 1
        assert html.count("</code></pre>") == 1
    joined = "\n".join(visible)
    for line in lines:
        assert joined.count(line) == 1
    assert "Sentence 59 explains the setup." in visible[-1]
    row = OutboundMessage.objects.get(kind="reply")
    assert row.message_ids == [p.message_id for p in parts] and row.parts_sent == len(parts)


def test_markdown_telegram_rejects_falls_back_to_plain_text(telegram_live):
    tg = telegram_live.tg
    markdown = "**Careful**: run `make deploy` first"
    telegram_live.llm.default = by_prompt({"deploy": fake_openai.text(markdown)})
    for method in ("sendMessage", "editMessageText"):
        tg.fail_next(
            method,
            description=REJECTED_HTML,
            when=lambda p: p.get("chat_id") == 1001 and p.get("parse_mode") == "HTML",
            times=100,
        )
    tg.send(private_chat(ALICE), ALICE, "how do I deploy?")
    wait(replies_done(1), 60, "the reply")
    [message] = tg.bot_messages(1001)
    assert message.parse_mode is None and message.text == markdown
    rejected = [c for c in tg.calls if c.status == 400 and c.params.get("chat_id") == 1001]
    assert rejected  # it was tried as HTML first


def test_streaming_edits_are_a_second_apart_and_a_429_is_waited_out(telegram_live):
    tg = telegram_live.tg
    story = " ".join(f"word{i}" for i in range(70))
    telegram_live.llm.default = by_prompt({"stream": fake_openai.text(story, delay=0.08)})
    tg.fail_next(
        "editMessageText",
        status=429,
        description="Too Many Requests: retry after 2",
        retry_after=2,
        when=lambda p: p.get("chat_id") == 1001,
    )
    tg.send(private_chat(ALICE), ALICE, "stream it")
    wait(replies_done(1), 60, "the reply")

    [message] = tg.bot_messages(1001)
    assert final_text(message) == story
    assert message.edits >= 2  # it streamed: several versions before the final one
    writes = [
        c
        for c in tg.calls
        if c.method in ("sendMessage", "editMessageText") and c.params.get("chat_id") == 1001
    ]
    gaps = [later.at - earlier.at for earlier, later in zip(writes, writes[1:], strict=False)]
    assert min(gaps) >= 0.98, gaps
    [limited] = [i for i, c in enumerate(writes) if c.status == 429]
    assert writes[limited + 1].at - writes[limited].at >= 1.98
    typing = [c for c in tg.calls_of("sendChatAction") if c.params["chat_id"] == 1001]
    assert typing and typing[0].params["action"] == "typing"


def test_stop_interrupts_the_reply_being_written(telegram_live):
    tg = telegram_live.tg
    telegram_live.llm.default = by_prompt(
        {"story": fake_openai.text("once upon a time " * 100, delay=0.05)}
    )
    tg.send(private_chat(ALICE), ALICE, "tell me a long story")
    wait(lambda: tg.bot_messages(1001), what="the streamed message")
    tg.send(private_chat(ALICE), ALICE, "/stop")
    turn = wait(lambda: Turn.objects.filter(status="interrupted").first(), what="the interrupt")
    assert "stopped from Telegram by Alice" in turn.interrupt_reason
    wait(replies_done(1), 60, "the reply")
    wait(lambda: len(tg.bot_messages(1001)) == 2, what="the notice")
    partial, notice = tg.bot_messages(1001)
    # What was written before the stop stays (a /stop sent right after the first edit may
    # find only its first word written), marked as stopped.
    assert final_text(partial).startswith("once")
    assert final_text(partial).endswith("(stopped)")
    assert final_text(notice) == "Stopped."
    assert Message.objects.get(text="tell me a long story")  # the history keeps the question


def test_new_starts_a_fresh_context_and_keeps_the_history(telegram_live):
    tg, llm = telegram_live.tg, telegram_live.llm
    llm.default = fake_openai.echo("re: ")
    tg.send(private_chat(ALICE), ALICE, "my favourite colour is teal")
    wait(replies_done(1))
    tg.send(private_chat(ALICE), ALICE, "/new")
    wait(lambda: any("Fresh start" in m.text for m in tg.bot_messages(1001)), what="/new")
    tg.send(private_chat(ALICE), ALICE, "what did I tell you?")
    wait(replies_done(2))
    seen = [m["content"] for m in llm.last_request["messages"] if m["role"] != "system"]
    assert seen == ["what did I tell you?"]
    history = Chat.objects.get(chat_key="telegram:1001").messages.order_by("id")
    assert [m.role for m in history] == ["user", "assistant", "marker", "user", "assistant"]
    assert history[0].text == "my favourite colour is teal"


def test_link_with_a_dashboard_code_links_the_telegram_user(telegram_live, make_person, client):
    from chats.models import Actor

    tg = telegram_live.tg
    person = make_person("alice")
    client.force_login(person)
    page = client.post("/telegram/link-code").content.decode()
    code = re.search(r"/link ([A-Z0-9]{4}-[A-Z0-9]{4})", page).group(1)

    tg.send(private_chat(ALICE), ALICE, f"/link {code}")
    wait(lambda: Actor.objects.filter(external_id="1001", person=person).exists(), what="link")
    notice = wait(lambda: tg.bot_messages(1001), what="the confirmation")
    assert "you are alice on the dashboard" in final_text(notice[0]).lower()
    assert "Alice" in client.get("/telegram/").content.decode()


def test_an_approved_pairing_lets_the_user_in_and_unknown_groups_are_ignored(
    telegram_live, make_person, client
):
    from bots.models import PairingRequest

    tg = telegram_live.tg
    telegram_live.llm.default = fake_openai.echo("re: ")
    stranger = tg_user(7777, "Mallory", username="mallory")
    tg.send(private_chat(stranger), stranger, "hi, who are you?")
    [notice] = wait(lambda: tg.bot_messages(7777), what="the pairing code")
    code = re.search(r"<code>([A-Z0-9]{4}-[A-Z0-9]{4})</code>", notice.text).group(1)
    assert not Message.objects.exists()

    staff = make_person("sam", is_staff=True)
    client.force_login(staff)
    page = client.get("/telegram/").content.decode()
    assert code in page and "Mallory" in page
    request = PairingRequest.objects.get(user_id=7777)
    assert client.post(f"/telegram/pairings/{request.pk}/approve").status_code == 302
    wait(lambda: len(tg.bot_messages(7777)) == 2, what="the welcome")
    assert "You're in" in final_text(tg.bot_messages(7777)[1])

    tg.send(private_chat(stranger), stranger, "hello again")
    wait(replies_done(1), what="the answer")
    assert final_text(tg.bot_messages(7777)[-1]) == "re: hello again"

    unknown = tg.send(group_chat(-100555, "Strangers"), ALICE, f"{MENTION} hi")
    wait(lambda: ProcessedUpdate.objects.filter(update_id=unknown["update_id"]).exists())
    assert ProcessedUpdate.objects.get(update_id=unknown["update_id"]).outcome == (
        "ignored:unknown chat"
    )
    time.sleep(1)
    assert tg.bot_messages(-100555) == []
    assert not Chat.objects.filter(chat_key="telegram:-100555").exists()


def test_a_photo_with_a_caption_is_stored_and_answered_once_it_is_in(telegram_live):
    tg, llm = telegram_live.tg, telegram_live.llm
    llm.default = fake_openai.echo("re: ")
    photo = png_bytes(16, 12)
    tg.push(tg.photo(private_chat(ALICE), ALICE, photo, caption="Is this rack wired right?"))
    wait(replies_done(1), 60, "the answer")
    stored = Message.objects.get(role="user")
    assert stored.text == "Is this rack wired right?"
    attachment = Attachment.objects.get(message=stored)
    assert attachment.media_type == "image/png" and attachment.blob.file.read() == photo
    # The caption, then what the message carries: this model takes no images, so it is told
    # plainly that it cannot see the photo (attachments.to_model).
    asked = fake_openai.last_user_text(llm.last_request)
    assert asked.startswith("Is this rack wired right?") and "you cannot see" in asked
    [answer] = [final_text(m) for m in tg.bot_messages(1001)]
    assert answer.startswith("re: Is this rack wired right?")


def test_an_album_is_answered_once_after_its_last_item(telegram_live, settings):
    """Three updates of one media group: three messages, each with its file fetched on the
    files' queue, and one turn (for the last item) once the album was quiet."""
    tg, llm = telegram_live.tg, telegram_live.llm
    llm.default = fake_openai.echo("re: ")
    chat, album = private_chat(ALICE), "album-e2e-1"
    items = [
        tg.photo(
            chat, ALICE, png_bytes(8, 8), caption="which cable is loose?", media_group_id=album
        ),
        tg.photo(chat, ALICE, png_bytes(9, 9), media_group_id=album),
        tg.document(chat, ALICE, b"rack 4: port 12 -> 13\n", "wiring.txt", media_group_id=album),
    ]
    for item in items:
        tg.push(item)

    wait(replies_done(1), 90, "the album's answer")
    wait(lambda: not TurnHold.objects.filter(state=TurnHold.State.HELD).exists(), 30, "holds")
    messages = list(Message.objects.filter(role="user").order_by("id"))
    assert [m.text for m in messages] == [
        "which cable is loose?",
        "[photo]",
        "[document wiring.txt]",
    ]
    assert sorted(Attachment.objects.values_list("message_id", "state")) == [
        (m.pk, "ready") for m in messages
    ]
    turn = Turn.objects.get()  # one turn for the album, not three
    assert turn.trigger_id == messages[-1].pk and turn.status == Turn.Status.COMPLETED
    # The model saw the whole album: the captioned item and the photo in the history.
    history = [m["content"] for m in llm.last_request["messages"] if m["role"] == "user"]
    first_texts = [c if isinstance(c, str) else c[0]["text"] for c in history]
    assert first_texts == ["which cable is loose?", "[photo]", "[document wiring.txt]"]
    # Each item's file travels with it: the photos named, the document's text read.
    carried = [c[1]["text"] for c in history]
    assert "photo_" in carried[0] and "you cannot see" in carried[0]
    assert "rack 4: port 12 -> 13" in carried[2]
    [answer] = [final_text(m) for m in tg.bot_messages(1001)]
    assert answer.startswith("re: [document wiring.txt]")
    assert OutboundMessage.objects.filter(kind="reply").count() == 1


def test_inline_buttons_approve_memory_only_for_the_entitled_person(telegram_live):
    from chats.services import actor_get_or_create
    from memory.models import MemoryEntry
    from memory.services import Author, memory_book, memory_propose

    tg = telegram_live.tg
    alice = actor_get_or_create(channel="telegram", user_id=1001, display_name="Alice")
    actor_get_or_create(channel="telegram", user_id=1002, display_name="Bob")
    outcome = memory_propose(
        book=memory_book(scope="user", actor=alice),
        change="add",
        author=Author(actor=alice),
        content="Alice prefers tea over coffee",
    )
    [prompt] = wait(lambda: tg.bot_messages(1001), what="the approval message")
    assert "prefers tea" in final_text(prompt)
    approve = prompt.reply_markup["inline_keyboard"][0][0]["callback_data"]

    tg.press(BOB, prompt, approve)  # someone else's press (or forged data) in Alice's chat
    wait(lambda: tg.calls_of("answerCallbackQuery"), what="the answer")
    # Not Bob's own private chat: refused before anyone's entitlement is even considered.
    assert "in your private chat" in tg.calls_of("answerCallbackQuery")[0].params["text"]
    assert MemoryEntry.objects.get(pk=outcome.entry.pk).status == "pending"
    assert tg.bot_messages(1001)[0].edits == 0

    tg.press(ALICE, prompt, approve)
    wait(lambda: MemoryEntry.objects.get(pk=outcome.entry.pk).status == "active", what="approve")
    wait(lambda: tg.bot_messages(1001)[0].edits == 1, what="the edited message")
    shown = tg.bot_messages(1001)[0]
    assert "Approved by Alice" in final_text(shown) and not shown.reply_markup
    assert MemoryEntry.objects.get(pk=outcome.entry.pk).events.filter(via="telegram").exists()


@pytest.fixture
def telegram_webhook_live(transactional_db, fake_llm, fake_telegram, settings):
    """daphne (receiving the webhook) + a worker + the bot process in webhook mode."""
    import os

    from tests.bots.live_bot import BotProcess
    from tests.live import LiveStack

    settings.TELEGRAM_WEBHOOK_SECRET = "s3cret-token"
    env = {
        **fake_telegram.env(),
        "TELEGRAM_ALLOWED_USERS": ",".join(settings.TELEGRAM_ALLOWED_USERS),
        "TELEGRAM_MODE": "webhook",
        "TELEGRAM_WEBHOOK_SECRET": "s3cret-token",
    }
    stack = LiveStack(
        llm_base_url=fake_llm.base_url, worker_name=f"tgw-{os.getpid()}@%h", extra_env=env
    )
    stack.env["TELEGRAM_WEBHOOK_URL"] = f"{stack.url}/telegram/webhook"
    bot = BotProcess(stack, fake_telegram)
    try:
        stack.start_web()
        stack.start_worker()
        bot.start()
        yield stack
    finally:
        bot.stop()
        stack.stop()


def test_webhook_mode_receives_over_http_and_answers_once(telegram_webhook_live, fake_telegram):
    import json
    import urllib.error
    import urllib.request

    tg, stack = fake_telegram, telegram_webhook_live
    assert tg.webhook["url"] == f"{stack.url}/telegram/webhook"
    assert tg.webhook["secret_token"] == "s3cret-token"
    assert not tg.calls_of("getUpdates")  # webhook mode never polls

    def deliver(update, secret="s3cret-token"):
        request = urllib.request.Request(
            f"{stack.url}/telegram/webhook",
            data=json.dumps(update).encode(),
            headers={
                "Content-Type": "application/json",
                "X-Telegram-Bot-Api-Secret-Token": secret,
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    update = tg.message(private_chat(ALICE), ALICE, "hello over the webhook")
    assert deliver(update, secret="guess") == 403
    assert deliver(update) == 200
    assert deliver(update) == 200  # Telegram retried: still one message, one reply
    wait(replies_done(1), 60, "the reply")
    assert Message.objects.filter(text="hello over the webhook").count() == 1
    assert [final_text(m) for m in tg.bot_messages(1001)] == ["ok"]


def test_a_dead_model_gets_a_clear_message_and_the_question_is_kept(telegram_live):
    tg = telegram_live.tg
    telegram_live.llm.default = by_prompt({"broken": fake_openai.error(500)})
    tg.send(private_chat(ALICE), ALICE, "this will hit a broken model")
    wait(replies_done(1), 60, "the failure notice")
    [notice] = tg.bot_messages(1001)
    assert final_text(notice).startswith("⚠️")
    assert Turn.objects.get().status == "failed"
    assert Message.objects.filter(text="this will hit a broken model").exists()


def test_a_url_in_a_streamed_reply_goes_out_with_link_previews_off(telegram_live):
    tg = telegram_live.tg
    answer = " ".join(["see https://attacker.example/pixel?who=alice"] + ["word"] * 40)
    telegram_live.llm.default = by_prompt({"link": fake_openai.text(answer, delay=0.05)})
    tg.send(private_chat(ALICE), ALICE, "a link please")
    wait(replies_done(1), 60, "the reply")
    writes = [
        c
        for c in tg.calls
        if c.method in ("sendMessage", "editMessageText") and c.params.get("chat_id") == 1001
    ]
    assert len(writes) >= 2  # a streamed preview, then its edits
    assert all(c.params.get("link_preview_options") == {"is_disabled": True} for c in writes)
