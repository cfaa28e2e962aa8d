"""Review gates: asked once before a background review calls the model; one may hold the
review back (the budgets app: a monthly cap that applies is used up). Other apps register
theirs in `AppConfig.ready()`; learning never imports them.

A gate gets a `ReviewStart` (what the review is and whose work it follows) and answers None
to let it run or the reason it does not; the review is then recorded `skipped` with that
reason and never retried (docs/LEARNING.md)."""

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReviewStart:
    """A claimed review about to call the model."""

    review_id: int
    chat_id: int
    # The trigger message of the turn the review follows (None: that turn was deleted); its
    # author is whom the review's spend is attributed to (usage's rule).
    trigger_id: int | None


# (the review about to start) -> None to run it, or why it does not run.
ReviewGate = Callable[[ReviewStart], "str | None"]

_gates: list[ReviewGate] = []


def register_review_gate(gate: ReviewGate) -> None:
    if gate not in _gates:
        _gates.append(gate)


def unregister_review_gate(gate: ReviewGate) -> None:
    if gate in _gates:
        _gates.remove(gate)


def review_refusal(start: ReviewStart) -> str | None:
    """The first gate's reason to hold the review back, or None. A gate that fails is
    logged and does not hold it (a broken check must not stop every review)."""
    for gate in list(_gates):
        try:
            reason = gate(start)
        except Exception:  # noqa: BLE001 - one gate's failure must not stop every review
            logger.exception("review gate %r failed", gate)
            continue
        if reason:
            return reason
    return None
