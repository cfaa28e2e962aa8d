"""The dispatcher's heartbeat, kept by the hub's one heartbeat mechanism (`operations`).

`operations` reads schedules (the scheduler's readiness, the scheduled runs' figures), so
schedules must not import it back: `operations.apps.OperationsConfig.ready()` installs its
heartbeat writer and reader here, and the dispatcher and `scheduler_status` go through them.
Without operations nothing is recorded and no dispatcher ever counts as running.
"""

from collections.abc import Callable
from datetime import datetime

Beat = Callable[..., None]  # beat(*, name: str, now: datetime | None = None)
Latest = Callable[..., datetime | None]  # latest(*, name: str)

_beat: Beat | None = None
_latest: Latest | None = None


def heartbeat_store_install(*, beat: Beat, latest: Latest) -> None:
    """Where heartbeats are written and read (operations' services and selectors)."""
    global _beat, _latest
    _beat, _latest = beat, latest


def heartbeat_beat(*, name: str, now: datetime | None = None) -> None:
    """Record that `name` is alive at `now` (nothing when no store is installed)."""
    if _beat is not None:
        _beat(name=name, now=now)


def heartbeat_latest(*, name: str) -> datetime | None:
    """When `name` last beat, on any host (None when never, or no store is installed)."""
    return _latest(name=name) if _latest is not None else None
