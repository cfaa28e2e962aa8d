"""attachments.fetching against a real HTTPS server on loopback: what it fetches, and that
redirects, size and time are checked on every hop. Loopback is refused in real use, so these
tests allow exactly the test server's address (and trust its certificate); everything else
keeps the real policy."""

import http.server
import ipaddress
import socket
import ssl
import threading
import time

import pytest

from attachments import fetching
from attachments.fetching import FetchRefused, fetch_url
from tests.attachments.conftest import png_bytes
from tests.fakes.tls import self_signed_certificate

PNG = png_bytes(3, 3)


class _Files(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body=b"", **headers):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        port = self.server.server_address[1]
        routes = {
            "/cat.png": lambda: self._send(200, PNG, Content_Type="image/png"),
            "/big": lambda: self._send(200, b"x" * 5000),
            "/to-cat": lambda: self._send(302, Location="/cat.png"),
            "/to-metadata": lambda: self._send(
                302, Location="https://169.254.169.254/latest/meta-data/"
            ),
            "/to-http": lambda: self._send(302, Location=f"http://127.0.0.1:{port}/cat.png"),
            "/loop": lambda: self._send(302, Location="/loop"),
        }
        if self.path == "/slow":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.1)
            return
        routes.get(self.path, lambda: self._send(404))()


@pytest.fixture
def server(tmp_path, monkeypatch):
    certificate = self_signed_certificate(tmp_path, names=("files.test",))
    cert_path = certificate.cert_path
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    httpd.socket = certificate.server_context().wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def trusting():
        context = ssl.create_default_context()
        context.load_verify_locations(cert_path)
        return context

    real_policy = fetching.address_allowed
    monkeypatch.setattr(fetching, "tls_context", trusting)
    monkeypatch.setattr(
        fetching,
        "address_allowed",
        lambda address: str(address) == "127.0.0.1" or real_policy(address),
    )
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_public_https_file_is_fetched_whole(server):
    fetched = fetch_url(f"{server}/cat.png", max_bytes=10_000, timeout=5)
    assert (fetched.data, fetched.content_type, fetched.name) == (PNG, "image/png", "cat.png")


def test_a_redirect_is_followed_and_checked_again(server):
    assert fetch_url(f"{server}/to-cat", max_bytes=10_000, timeout=5).data == PNG
    with pytest.raises(FetchRefused, match="non-public"):
        fetch_url(f"{server}/to-metadata", max_bytes=10_000, timeout=5)
    with pytest.raises(FetchRefused, match="Only https"):
        fetch_url(f"{server}/to-http", max_bytes=10_000, timeout=5)
    with pytest.raises(FetchRefused, match="redirected more than"):
        fetch_url(f"{server}/loop", max_bytes=10_000, timeout=5)


def test_size_and_time_are_bounded(server):
    with pytest.raises(FetchRefused, match="larger than 1000 bytes"):
        fetch_url(f"{server}/big", max_bytes=1000, timeout=5)
    with pytest.raises(FetchRefused):
        fetch_url(f"{server}/slow", max_bytes=10_000, timeout=1)


def test_a_name_is_resolved_once_and_the_checked_address_is_the_one_connected(server, monkeypatch):
    """DNS rebinding: a name that answers a public-looking (here: the allowed) address first
    and a private one after is connected to at the first answer, never asked again."""
    port = int(server.rsplit(":", 1)[1])
    answers = iter(["127.0.0.1", "10.0.0.1", "10.0.0.1"])
    calls = []

    def getaddrinfo(host, *args, **kwargs):
        calls.append(host)
        address = next(answers)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(fetching.socket, "getaddrinfo", getaddrinfo)
    fetched = fetch_url(f"https://files.test:{port}/cat.png", max_bytes=10_000, timeout=5)
    assert fetched.data == PNG and calls == ["files.test"]


def test_the_real_policy_refuses_every_non_public_address():
    for address in (
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:10.0.0.1",
        "ff02::1",
    ):
        assert not fetching.address_allowed(ipaddress.ip_address(address)), address
    assert fetching.address_allowed(ipaddress.ip_address("93.184.215.14"))
    assert fetching.address_allowed(ipaddress.ip_address("2606:4700::1111"))


@pytest.mark.django_db
def test_v1_stores_a_fetched_image_when_fetching_is_on(server, owner, settings):
    from openai_api.following import land
    from openai_api.parsing import parse_chat_completion
    from tests.attachments.test_openai_parts import _blob_bytes, _Request, completion, image_message

    settings.OPENAI_API_FETCH_IMAGE_URLS = True
    body = completion(image_message(f"{server}/to-cat"))
    landed, _ = land(owner, parse_chat_completion(_Request(), body))
    image = landed.trigger.attachments.get()
    assert (image.name, image.media_type, image.declared_type) == (
        "cat.png",
        "image/png",
        "image/png",
    )
    assert _blob_bytes(image) == PNG
