"""Keeping a model server's connection open from one streamed completion to the next.

The openai SDK's sync `Stream` stops reading at the `[DONE]` event and closes the response
with the rest of the body (the chunked encoding's last, empty chunk) still unread. An
HTTP/1.1 connection whose response was not read to its end cannot carry another request, so
the HTTP client closes it, and every model call paid a new TCP and TLS handshake. (The SDK's
async stream drains the body for this reason; its sync stream does not.)

`ReusableBody` replaces the response's byte stream: once the provider has seen the reply's
finish reason it marks the body finished, and closing it then reads the few bytes left
before letting the connection go back to the pool. The drain is bounded, in bytes and in
time per read, so a server that keeps the body open after `[DONE]` costs at most a second
and its connection, never the caller's whole timeout.
"""

import logging

try:
    import httpx2 as httpx
except ImportError:  # an older openai SDK built on httpx
    import httpx

logger = logging.getLogger(__name__)

DRAIN_MAX_BYTES = 64 * 1024  # after [DONE] a server sends a few bytes; more is not an ending
DRAIN_READ_SECONDS = 1.0


class ReusableBody(httpx.SyncByteStream):
    """A response body that, once its reply finished, is read to its end when closed."""

    def __init__(self, response: httpx.Response):
        self._response = response
        self._inner = response.stream
        self._closed = False
        self.reply_finished = False

    def __iter__(self):
        yield from self._inner

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.reply_finished:
                self._drain()
        finally:
            self._inner.close()

    def _drain(self) -> None:
        # The HTTP client reads the read timeout from the request each time a body is
        # iterated, so this shorter one bounds the drain without touching the reply's.
        timeouts = self._response.request.extensions.get("timeout")
        if isinstance(timeouts, dict):
            timeouts["read"] = min(timeouts.get("read") or DRAIN_READ_SECONDS, DRAIN_READ_SECONDS)
        left = DRAIN_MAX_BYTES
        try:
            for chunk in self._inner:
                left -= len(chunk)
                if left < 0:
                    logger.info("Model server sent over %d bytes after [DONE]", DRAIN_MAX_BYTES)
                    return
        except (httpx.HTTPError, httpx.StreamError) as exc:
            # The reply is complete: a body that ends badly only costs its connection.
            logger.info("Model server's body did not end cleanly after [DONE]: %s", exc)


def reusable_body(stream) -> ReusableBody | None:
    """Put a `ReusableBody` under an SDK `Stream`'s response; None when the SDK's HTTP client
    is not the one this module knows (the connection is then simply not reused)."""
    response = getattr(stream, "response", None)
    if not isinstance(response, httpx.Response) or not isinstance(
        response.stream, httpx.SyncByteStream
    ):
        return None
    body = ReusableBody(response)
    response.stream = body
    return body
