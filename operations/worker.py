"""Each Celery worker's heartbeat: a thread in the worker's main process writes a
`worker` Heartbeat row for its node name every WORKER_HEARTBEAT_SECONDS, from the moment
the worker is ready until it shuts down (then the row is removed). Readiness reads them."""

import logging
import socket
import threading

from django.conf import settings
from django.db import close_old_connections, connection

from operations.services import heartbeat_beat, heartbeat_stop

logger = logging.getLogger(__name__)

WORKER = "worker"


class WorkerHeartbeat(threading.Thread):
    """Beats for node `node` until stopped; a failed write (database down) is logged and
    retried at the next beat."""

    def __init__(self, node: str, interval: float):
        super().__init__(name=f"heartbeat {node}", daemon=True)
        self.node = node
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                self.beat_once()
                self.stopped.wait(self.interval)
        finally:
            connection.close()

    def beat_once(self) -> None:
        try:
            close_old_connections()
            heartbeat_beat(name=WORKER, host=self.node)
        except Exception:  # noqa: BLE001 - the next beat tries again
            logger.warning("worker heartbeat %s could not be written", self.node, exc_info=True)

    def stop(self) -> None:
        self.stopped.set()


_running: dict[str, WorkerHeartbeat] = {}


def _node(sender) -> str:
    return getattr(sender, "hostname", None) or f"celery@{socket.gethostname()}"


def on_worker_ready(sender=None, **kwargs) -> WorkerHeartbeat:
    """Celery's worker_ready: start beating for this worker's node."""
    node = _node(sender)
    thread = WorkerHeartbeat(node, settings.WORKER_HEARTBEAT_SECONDS)
    _running[node] = thread
    thread.start()
    return thread


def on_worker_shutdown(sender=None, **kwargs) -> None:
    """Celery's worker_shutdown: stop beating and remove the row, so a worker stopped on
    purpose is not waited for."""
    node = _node(sender)
    thread = _running.pop(node, None)
    if thread is not None:
        thread.stop()
        thread.join(timeout=5)
    try:
        close_old_connections()
        heartbeat_stop(name=WORKER, host=node)
    except Exception:  # noqa: BLE001 - readiness ages the row out anyway
        logger.warning("could not remove the heartbeat of %s", node, exc_info=True)
