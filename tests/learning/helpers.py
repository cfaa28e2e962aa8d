"""Helpers of the learning tests: messages in chats, turns run as a worker would."""

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, message_received, turn_claim
from chats.models import Chat, Turn
from chats.services import message_ingest
from learning.models import ChatLearning
from tests.fakes import openai_server as fake_openai


def say(text, *, chat_id="1", user="10", name="Alice", kind="dm", person=None, channel="telegram"):
    """Store a user message and request its turn (not enqueued): the queued Turn."""
    result = message_ingest(
        channel=channel,
        chat_id=chat_id,
        user_id=user,
        user_name=name,
        text=text,
        chat_kind=kind,
        person=person,
    )
    return message_received(result, enqueue=False)


def run(turn: Turn) -> Turn:
    """Claim and run the turn here, whatever its outcome."""
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    return run_claimed_turn(claim.turn, provider=get_provider())


def chat_turn(fake, text="hi", *replies, **where) -> Turn:
    """One completed turn: the fake model answers with `replies` (default: "ok")."""
    fake.script(*(replies or (fake_openai.text("ok"),)))
    done = run(say(text, **where))
    assert done.status == Turn.Status.COMPLETED, done.error
    return done


def counters(chat_id="1", channel="telegram") -> tuple[int, int]:
    """(user turns since the memory review, iterations since the skill review)."""
    chat = Chat.objects.get(channel=channel, external_id=chat_id)
    learning = ChatLearning.objects.get(chat=chat)
    return learning.user_turns_since_memory_review, learning.iterations_since_skill_review


def calls(name, arguments, count=1, prefix="c"):
    """A model step calling tool `name` `count` times at once."""
    return fake_openai.tool_calls([(f"{prefix}{n}", name, arguments) for n in range(count)])
