"""Button presses reach the handler registered for their prefix (`bots.callbacks`): a new
kind of button plugs in by registering, and a press nobody handles decides nothing."""

import pytest

from bots import callbacks
from bots.callbacks import callback_answer, callback_handlers, register_callback_handler
from bots.models import OutboundMessage, ProcessedUpdate
from bots.outbox import UpdateOutcome
from tests.bots.conftest import process
from tests.fakes.telegram_server import BotMessage, FakeTelegram, tg_user

pytestmark = [pytest.mark.django_db]

ALICE = tg_user(1001, "Alice")
BUILDER = FakeTelegram()  # not started: it builds updates with fresh update ids
BUTTON = BotMessage(
    chat_id=1001,
    message_id=900,
    text="Pick one",
    parse_mode="HTML",
    thread_id=None,
    reply_to=None,
    reply_markup={"inline_keyboard": []},
    sent_at=0,
)


@pytest.fixture(autouse=True)
def telegram(settings):
    settings.TELEGRAM_BOT_TOKEN = "7654321:TEST"
    settings.TELEGRAM_ALLOWED_USERS = ["1001"]


@pytest.fixture
def registered(monkeypatch):
    """A registry the test may add to; the app's own handlers stay in it."""
    monkeypatch.setattr(callbacks, "_handlers", dict(callbacks._handlers))


def test_the_apps_buttons_are_registered_by_prefix():
    assert {"mem", "skl", "sch", "tool"} <= set(callback_handlers())


def test_a_registered_handler_gets_its_presses_and_no_other(registered):
    pressed = []

    def handler(query, identity):
        pressed.append(query.data)
        return UpdateOutcome("votes:counted", outbound=[callback_answer(query, "Counted.")])

    register_callback_handler("vote", handler)
    outcome = process(BUILDER.press(ALICE, BUTTON, "vote:7:up"))
    assert outcome.result == "votes:counted"
    assert pressed == ["vote:7:up"]
    assert OutboundMessage.objects.get(pk=outcome.outbound[0].pk).payload["text"] == "Counted."
    assert ProcessedUpdate.objects.filter(outcome="votes:counted").count() == 1
    # Another app's prefix still goes to its own handler.
    assert process(BUILDER.press(ALICE, BUTTON, "mem:abc:1:a")).result == "callback:unknown"
    assert pressed == ["vote:7:up"]


@pytest.mark.parametrize("data", ["nobody:1:a", "vote", "", "mem"])
def test_a_press_nobody_handles_is_answered_and_decides_nothing(data):
    outcome = process(BUILDER.press(ALICE, BUTTON, data))
    assert outcome.result == "callback:unknown"
    assert outcome.outbound[0].payload["text"] == "This button is old."


def test_a_prefix_belongs_to_one_handler(registered):
    def first(query, identity):
        return UpdateOutcome("first")

    register_callback_handler("vote", first)
    register_callback_handler("vote", first)  # a second ready() is harmless
    with pytest.raises(ValueError, match="taken"):
        register_callback_handler("vote", lambda query, identity: UpdateOutcome("second"))
    with pytest.raises(ValueError, match="must match"):
        register_callback_handler("Vote:", first)
