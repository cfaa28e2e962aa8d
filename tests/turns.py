"""Running one turn in the test process, as a worker would, for tests of what the model saw."""

from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, turn_claim
from chats.models import Turn


def run(turn: Turn) -> Turn:
    """Claim and run `turn` to the end here; it must complete."""
    claim = turn_claim(turn_id=turn.pk, worker="test")
    assert claim.outcome is Claim.CLAIMED
    done = run_claimed_turn(claim.turn, provider=get_provider())
    assert done.status == Turn.Status.COMPLETED, done.error
    return done


def system_prompt(request: dict) -> str:
    """The system prompt of one request the fake model received."""
    return request["messages"][0]["content"]
