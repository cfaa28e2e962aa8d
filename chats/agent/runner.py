"""The port through which a queued turn reaches whoever runs it.

The turn lifecycle (`chats.agent.turns`) queues turns and knows nothing of Celery: it hands
their ids to the runner installed here after the commit. `chats.apps.ChatsConfig.ready()`
installs the Celery runner of `chats.tasks`; a caller that runs a turn itself in its own
process (the terminal's `manage.py chat`, the benchmarks) asks for no enqueue
(`enqueue=False`) and runs the claimed turn through `chats.agent.loop.run_claimed_turn`.
"""

from collections.abc import Sequence
from typing import Protocol


class TurnRunner(Protocol):
    def enqueue(self, turn_id: int) -> None:
        """Hand one queued turn to a worker; raises when it cannot (the turn stays queued)."""

    def enqueue_many(self, turn_ids: Sequence[int]) -> None:
        """Hand several queued turns over at once (one broker connection)."""


class NoRunner:
    """Before an app installed a runner: nothing is handed over, the turn stays queued."""

    def enqueue(self, turn_id: int) -> None:
        raise RuntimeError("no turn runner installed (chats.apps installs the Celery one)")

    def enqueue_many(self, turn_ids: Sequence[int]) -> None:
        raise RuntimeError("no turn runner installed (chats.apps installs the Celery one)")


_runner: TurnRunner = NoRunner()


def turn_runner_install(runner: TurnRunner) -> TurnRunner:
    """Make `runner` the one every queued turn is handed to; returns the one it replaces."""
    global _runner
    previous, _runner = _runner, runner
    return previous


def turn_runner() -> TurnRunner:
    """The installed runner."""
    return _runner
