"""The HTTP server under the fake Bot API and the fake OpenAI server: threaded, and able to
cut its idle keep-alive connections so that a test can stop it without waiting on them."""

import contextlib
import socket
import threading
from http.server import ThreadingHTTPServer


class FakeHTTPServer(ThreadingHTTPServer):
    """A threaded server that knows its open connections; handlers reach the fake through
    `server.fake`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, *, fake):
        self.fake = fake
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Cut idle keep-alive connections so that their handler threads end."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
