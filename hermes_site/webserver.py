"""The hub's web server: daphne, with request bodies bounded per path before they are read.

Twisted reads a request's whole body (into memory, or a temporary file past 100 kB) before
daphne hands the request to the ASGI application, so no middleware or view can refuse a
300 MB POST before it has been received and stored. This server refuses it where the headers
are known: a declared Content-Length past the path's limit (hermes_site/body_limits.py) is
answered 413 at once, and a chunked body is cut with 413 as soon as what was received passes
the limit; either way the connection is closed and nothing more is read.

Run it as daphne: `python -m hermes_site.webserver -b 127.0.0.1 -p 8000
hermes_site.asgi:application` (every daphne option applies). `make run` and the live tests
start it that way.
"""

# daphne.cli imports daphne.server first, which installs the asyncio reactor before anything
# else imports Twisted's default one.
from daphne.cli import CommandLineInterface  # isort:skip
from daphne.http_protocol import HTTPFactory, WebRequest  # isort:skip
from daphne.server import Server  # isort:skip

import json
import logging

from hermes_site.body_limits import body_limit_for, request_path

logger = logging.getLogger("hermes_site.webserver")  # also when run as __main__

# The pieces a received body reaches the application in (daphne's default: 8 KiB).
REQUEST_BUFFER_BYTES = 1024 * 1024


def refusal(limit: int) -> bytes:
    """A complete 413 response naming the limit, in both API error shapes at once (API v1's
    `code`/`message`, OpenAI's `type`/`param`), closing the connection."""
    message = f"The request body must be at most {limit} bytes."
    body = json.dumps(
        {
            "error": {
                "code": "payload_too_large",
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "limit_bytes": limit,
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 413 Content Too Large\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class BoundedWebRequest(WebRequest):
    """daphne's request, refusing a body past its path's limit before keeping any of it."""

    body_path = "/"
    body_limit = 0
    body_received = 0
    body_refused = False

    def gotLength(self, length):
        # Called once the headers are parsed and before any byte of the body. The request line
        # is known to the channel only (method and path are set on the request at the end).
        target = getattr(self.channel, "_path", None)
        if isinstance(target, bytes):
            self.body_path = request_path(target)
        self.body_limit = body_limit_for(self.body_path)
        if length is not None and length > self.body_limit:
            self.refuse_body(f"declared {length} bytes")
            return
        super().gotLength(length)

    def handleContentChunk(self, data):
        if self.body_refused:
            return  # the rest of a segment received with the part that passed the limit
        self.body_received += len(data)
        if self.body_received > self.body_limit:
            self.refuse_body(f"sent more than {self.body_limit} bytes")
            return
        super().handleContentChunk(data)

    def requestReceived(self, command, path, version):
        if self.body_refused:
            return  # answered already; the application never sees this request
        super().requestReceived(command, path, version)

    def refuse_body(self, detail: str) -> None:
        """Answer 413 and close: the body is never read further, the application never runs."""
        self.body_refused = True
        # Twisted answers "Expect: 100-continue" right after gotLength; not after a refusal.
        self.requestHeaders.removeHeader(b"Expect")
        peer = self.channel.transport.getPeer()
        logger.warning(
            "refused a request body to %s from %s: %s, the limit is %d bytes",
            self.body_path,
            getattr(peer, "host", peer),
            detail,
            self.body_limit,
        )
        if self.content is not None:
            self.content.close()  # a chunked body's temporary file: gone with what it holds
        self.channel.transport.write(refusal(self.body_limit))
        self.channel.loseConnection()


class BoundedHTTPFactory(HTTPFactory):
    """daphne's HTTP factory, building connections whose requests are BoundedWebRequest."""

    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedWebRequest
        return protocol


class HubServer(Server):
    """daphne's server with BoundedHTTPFactory in place of daphne's own factory."""

    def __init__(self, *args, **kwargs):
        # daphne hands a received body to the application in pieces of this size, all at
        # once; its 8 KiB made a 20 MiB upload 2,560 queued messages, each written to disk
        # through its own thread hop by Django (bench/attachments_upload_bench.py).
        kwargs.setdefault("request_buffer_size", REQUEST_BUFFER_BYTES)
        super().__init__(*args, **kwargs)

    @property
    def http_factory(self):
        return self._http_factory

    @http_factory.setter
    def http_factory(self, factory):
        # Server.run() builds daphne's factory right before it listens; ours takes its place
        # (the same class with bounded requests), so no connection ever meets daphne's.
        self._http_factory = BoundedHTTPFactory(self)


class HubCommandLine(CommandLineInterface):
    description = "Hermes Hub's HTTP/WebSocket server (daphne with bounded request bodies)"
    server_class = HubServer


if __name__ == "__main__":
    HubCommandLine.entrypoint()
