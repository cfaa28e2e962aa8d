"""The lease heartbeat of a running turn.

A turn's lease must stay alive for exactly as long as its worker is alive, whatever the turn
is doing: compressing history, running a tool, waiting for a slow model's first token. So
renewal does not depend on the loop or the provider calling back; a small thread per running
turn renews the lease every TURN_LEASE_SECONDS / 3 until the turn ends.

When a renewal finds the turn no longer running (another process found the lease expired and
marked it interrupted; it may have raised the interrupt flag too, but Redis can be down),
the heartbeat records the loss and raises the turn's interrupt in this process, so the loop
stops at its next check and stores nothing more (`turn_append` and `turn_finish` refuse).
"""

import logging
import threading

from django.conf import settings
from django.db import connections

from chats.agent.interrupts import request_interrupt
from chats.agent.turns import LEASE_LOST, turn_renew_lease

logger = logging.getLogger(__name__)


class LeaseHeartbeat:
    """Renews one running turn's lease from its own thread (with its own database
    connection, closed when the thread ends) from `start()` until `stop()`."""

    def __init__(self, turn_id: int, *, interval: float | None = None):
        self.turn_id = turn_id
        self.interval = interval if interval is not None else settings.TURN_LEASE_SECONDS / 3
        self.lost = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"turn-lease-{turn_id}", daemon=True)

    def start(self) -> "LeaseHeartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing and wait for a renewal in flight, so that nothing renews after the
        turn's final write (which would look like a lost lease)."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.interval):
                try:
                    held = turn_renew_lease(turn_id=self.turn_id)
                except Exception:  # noqa: BLE001 - a database hiccup: try again next beat
                    logger.warning(
                        "could not renew the lease of turn %s", self.turn_id, exc_info=True
                    )
                    connections["default"].close()  # a broken connection is reopened next time
                    continue
                if not held:
                    self.lost = True
                    logger.warning("turn %s lost its lease; stopping it", self.turn_id)
                    request_interrupt(self.turn_id, LEASE_LOST)
                    return
        finally:
            connections.close_all()  # this thread's connections only (they are per thread)
