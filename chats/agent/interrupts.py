"""Interrupt flags that cross processes through Redis.

The web process, the Telegram bridge or the CLI raise a flag for a running turn; the worker
running it checks the flag between text deltas and tool calls. A local set covers turns run
in-process (the CLI) and keeps interrupts working, within one process, when Redis is down.
"""

import threading

from django.conf import settings

from hermes_site.redis import guarded

FLAG_TTL_SECONDS = 3600
_local_flags: dict[int, str] = {}
_local_lock = threading.Lock()


def _key(turn_id: int) -> str:
    return f"{settings.REDIS_KEY_PREFIX}:interrupt:{turn_id}"


def request_interrupt(turn_id: int, reason: str = "interrupted") -> None:
    """Ask the turn to stop at its next delta or tool boundary."""
    with _local_lock:
        _local_flags[turn_id] = reason
    # With Redis down the local flag still stops a turn running in this process.
    guarded(
        lambda r: r.set(_key(turn_id), reason, ex=FLAG_TTL_SECONDS), default=None, what="interrupt"
    )


def interrupt_reason(turn_id: int) -> str | None:
    """The reason the turn was asked to stop, or None to go on."""
    with _local_lock:
        if turn_id in _local_flags:
            return _local_flags[turn_id]
    # A dead Redis must not stop (or stall) a running turn.
    value = guarded(lambda r: r.get(_key(turn_id)), default=None, what="interrupt check")
    return value.decode() if value else None


def clear_interrupt(turn_id: int) -> None:
    with _local_lock:
        _local_flags.pop(turn_id, None)
    guarded(lambda r: r.delete(_key(turn_id)), default=None, what="interrupt clear")


def clear_interrupts(turn_ids: list[int]) -> None:
    """`clear_interrupt` for many turns in one Redis round trip (a batch of new turns)."""
    if not turn_ids:
        return
    with _local_lock:
        for turn_id in turn_ids:
            _local_flags.pop(turn_id, None)
    keys = [_key(turn_id) for turn_id in turn_ids]
    guarded(lambda r: r.delete(*keys), default=None, what="interrupt clear")
