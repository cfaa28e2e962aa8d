"""The HTTP server under the fake Bot API and the fake OpenAI server: threaded, able to
cut its idle keep-alive connections so that a test can stop it without waiting on them,
counting the connections it accepted, and optionally speaking TLS."""

import contextlib
import socket
import ssl
import threading
from http.server import ThreadingHTTPServer


class FakeHTTPServer(ThreadingHTTPServer):
    """A threaded server that knows its open connections; handlers reach the fake through
    `server.fake`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, *, fake, tls: ssl.SSLContext | None = None):
        self.fake = fake
        self.tls = tls
        self.accepted = 0  # connections accepted so far: a client reusing one adds none
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def get_request(self):
        request, client_address = super().get_request()
        if self.tls is not None:
            request = self.tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        return request, client_address

    def process_request(self, request, client_address):
        with self._connections_lock:
            self._connections.add(request)
            self.accepted += 1
        super().process_request(request, client_address)

    def finish_request(self, request, client_address):
        # Runs in the connection's own thread, so a slow TLS client never blocks accepting
        # the next one.
        if isinstance(request, ssl.SSLSocket):
            try:
                request.do_handshake()
            except OSError:  # ssl.SSLError included: a client that gave up or distrusts us
                return
        super().finish_request(request, client_address)

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
