"""What a waiting turn waits for, as the terminal asks it: apps that make turns wait (a
tool call's approval) register a wait point here, so the in-process terminal can show the
decision and take it without the engine importing those apps.

A wait point offers: `pending_card(turn)` (the open decision of that turn, or None),
`describe(card)` (its text for the terminal), `may_decide(chat, person)`, and
`decide(card, person, *, approve, always) -> str` (the outcome in words; it queues the
turn again without enqueueing it: the terminal runs its turns itself).
"""

from typing import Any, Protocol


class WaitPoint(Protocol):
    def pending_card(self, turn) -> Any: ...

    def describe(self, card) -> str: ...

    def may_decide(self, chat, person) -> bool: ...

    def decide(self, card, person, *, approve: bool, always: bool) -> str: ...


_points: list[WaitPoint] = []


def register_wait_point(point: WaitPoint) -> None:
    if point not in _points:
        _points.append(point)


def wait_points() -> list[WaitPoint]:
    return list(_points)
