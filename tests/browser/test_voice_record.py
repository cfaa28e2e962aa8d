"""The composer's record button, in Chromium with a fake microphone that plays a WAV
espeak-ng spoke (`--use-fake-device-for-media-stream --use-file-for-fake-audio-capture`):
record, send, and see the voice message appear in another member's browser live, with its
player, then its transcript (made by the hub's engine on the voice queue) marked
"transcribed automatically"; the audio plays from the hub for readers only (an
outsider's browser gets 404). The page trips no Content-Security-Policy, and a page served
where browsers give no microphone says why instead of failing silently."""

import os

import pytest
from playwright.sync_api import expect

from attachments.models import Attachment
from chats.models import ChatMember, Message
from chats.services import chat_get_or_create, chat_member_ensure
from tests.attachments.audio import speech_wav
from tests.browser.conftest import BROWSER_TIMEOUT_MS, CHROMIUM, CHROMIUM_ARGS
from tests.browser.test_attachments import blobs_folder, open_room  # noqa: F401 - fixture
from tests.browser.test_security import watch_policy
from tests.fakes import openai_server as fake_openai

SPOKEN = "please book the meeting room for friday morning"


@pytest.fixture(scope="module")
def microphone_wav(tmp_path_factory):
    path = tmp_path_factory.mktemp("microphone") / "speech.wav"
    path.write_bytes(speech_wav(SPOKEN))
    return path


@pytest.fixture(scope="module")
def browser_with_microphone(microphone_wav):
    """Chromium whose microphone is the WAV file, granted without a prompt."""
    if not os.path.exists(CHROMIUM):
        message = f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    args = [
        *CHROMIUM_ARGS,
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone_wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def voice_stack(transactional_db, fake_llm, settings):
    """daphne and a worker that reads the files' and the voice queues (as `make run`'s
    background worker does), so a recording is transcribed by the hub's engine."""
    from django.conf import global_settings

    from tests.live import LiveStack

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    stack = LiveStack(
        llm_base_url=fake_llm.base_url,
        worker_name=f"voice-{os.getpid()}@%h",
        extra_env={"STT_BASE_URL": "", "VOICE_CPU_THREADS": "2"},
    )
    try:
        stack.start_web()
        stack.start_worker(extra_queues=("files", "voice"))
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def mic_page_for(browser_with_microphone, voice_stack):
    live_stack = voice_stack
    contexts = []

    def make(person, *, base_url=None):
        context = browser_with_microphone.new_context(base_url=base_url or live_stack.url)
        context.set_default_timeout(BROWSER_TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto("/accounts/login/")
        page.fill("#id_username", person.get_username())
        page.fill("#id_password", f"pw-{person.get_username()}-123!")
        page.click("button[type=submit]")
        page.wait_for_url(f"{base_url or live_stack.url}/")
        return page

    yield make
    for context in contexts:
        context.close()


def test_a_recorded_voice_message_goes_to_the_room_and_shows_live_elsewhere(
    blobs_folder,  # noqa: F811
    mic_page_for,
    make_person,
    fake_llm,
):
    alice, bob, oscar = make_person("alice"), make_person("bob"), make_person("oscar")
    room, _ = chat_get_or_create(channel="web", chat_id="voice-room", title="Voice room")
    chat_member_ensure(chat=room, person=alice, role=ChatMember.Role.OWNER)
    chat_member_ensure(chat=room, person=bob)
    fake_llm.script(fake_openai.text("Booked."))

    bob_page = mic_page_for(bob)
    open_room(bob_page, room)
    alice_page = mic_page_for(alice)
    violations = watch_policy(alice_page)
    open_room(alice_page, room)

    record = alice_page.locator("#composer-record")
    record.click()
    expect(record).to_have_attribute("aria-pressed", "true")
    expect(record).to_contain_text("Send voice 0:02", timeout=20_000)
    record.click()  # stop and send
    expect(record).to_have_attribute("aria-pressed", "false")

    mine = alice_page.locator("article.message-user")
    expect(mine.locator(".file-heard")).to_have_count(1, timeout=30_000)
    # Bob's page receives it live: a player of the hub's audio and the transcript's place.
    theirs = bob_page.locator("article.message-user .file-heard")
    expect(theirs).to_have_count(1, timeout=30_000)
    player = theirs.locator("audio.file-player")
    expect(player).to_have_count(1)
    # The transcript replaces "transcribing…" on both pages when the engine is done.
    for page in (bob_page, alice_page):
        card = page.locator("article.message-user .file-heard .transcript")
        expect(card.locator(".transcript-mark")).to_contain_text(
            "transcribed automatically", timeout=180_000
        )
        expect(card.locator(".transcript-text")).to_contain_text("meeting room")
    assert "transcribing…" not in theirs.inner_text()

    message = Message.objects.get(role="user", chat=room)
    attachment = Attachment.objects.get(message=message)
    assert attachment.kind == "audio" and attachment.media_type in ("audio/webm", "audio/ogg")
    assert attachment.name.startswith("voice-message-") and attachment.size > 1000
    # The recording is the microphone's: seconds of sound, not an empty container.
    src = player.get_attribute("src")
    assert src == f"/attachments/{attachment.pk}/listen"
    duration = bob_page.evaluate(
        """async (src) => {
            const audio = new Audio(src);
            await new Promise((ok, fail) => { audio.onloadedmetadata = ok; audio.onerror = fail; });
            if (audio.duration === Infinity) {  // MediaRecorder's WebM has no duration yet
                audio.currentTime = 1e6;
                await new Promise(ok => { audio.ontimeupdate = ok; });
            }
            return audio.duration;
        }""",
        src,
    )
    assert duration > 1.5
    # Readers only: an outsider's browser gets 404 for the audio and its download.
    oscar_page = mic_page_for(oscar)
    for view in ("listen", "download"):
        assert oscar_page.request.get(f"/attachments/{attachment.pk}/{view}").status == 404
    assert violations == []


def test_without_a_secure_page_the_record_button_says_why(mic_page_for, make_person, fake_llm):
    """http:// on a name other than localhost is no secure context: browsers give it no
    microphone, and the button explains instead of failing."""
    alice = make_person("alice")
    room, _ = chat_get_or_create(channel="web", chat_id="plain-room", title="Plain room")
    chat_member_ensure(chat=room, person=alice, role=ChatMember.Role.OWNER)
    page = mic_page_for(alice)
    open_room(page, room)
    page.evaluate("Object.defineProperty(window, 'isSecureContext', {value: false})")
    # The button reads the context when the page starts: start it again as an insecure page.
    page.add_init_script("Object.defineProperty(window, 'isSecureContext', {value: false})")
    page.reload()
    page.locator("#composer-record").click()
    expect(page.locator("#composer-error")).to_contain_text("Recording needs HTTPS")
    assert Attachment.objects.count() == 0
