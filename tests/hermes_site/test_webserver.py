"""The web server `make run` starts (hermes_site.webserver) against oversized request bodies.

Every test talks to a real server process over a raw socket, so what is measured is what a
client sees: when the answer arrives relative to what it has sent, whether the server kept
reading, how much memory it took and whether it spooled anything to its temporary directory.
"""

import contextlib
import http.client
import json
import os
import socket
from pathlib import Path

import pytest
from django.conf import settings

from chats.models import Message
from chats.services import api_token_create
from tests.live import LiveStack

pytestmark = pytest.mark.timeout(180)

MESSAGES = "/api/v1/messages"
HUGE = 300 * 1024 * 1024


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    """One server for the module, with a temporary directory of its own to inspect."""
    temp_dir = tmp_path_factory.mktemp("webserver-tmp")
    stack = LiveStack(llm_base_url=None, worker_name="unused", extra_env={"TMPDIR": str(temp_dir)})
    stack.temp_dir = temp_dir
    try:
        stack.start_web()
        yield stack
    finally:
        stack.stop()


def connect(web) -> socket.socket:
    return socket.create_connection(("127.0.0.1", web.port), timeout=20)


def head(path: str, *lines: str) -> bytes:
    return "\r\n".join([f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *lines, "", ""]).encode()


def read_response(sock: socket.socket) -> tuple[int, dict, bytes]:
    """Status, headers and body of the one response on `sock`, read until the server closes."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break  # the server closed with our unread bytes; what it sent before is in `data`
        if not chunk:
            break
        data += chunk
    header_block, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = header_block.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def open_temp_files(web) -> list[str]:
    """Files the server process holds open in its temporary directory (spooled bodies are
    unlinked at once, so they show here and nowhere else)."""
    fd_dir = Path(f"/proc/{web.web.pid}/fd")
    names = []
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        if target.startswith(str(web.temp_dir)):
            names.append(target)
    return names


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def assert_refused(status, headers, body, limit):
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert error["code"] == "payload_too_large"
    assert error["limit_bytes"] == limit
    assert str(limit) in error["message"]


def test_declared_300_mb_body_is_refused_before_the_client_sends_it(web):
    limit = settings.API_MAX_BODY_BYTES
    with connect(web) as sock:
        sock.sendall(head(MESSAGES, f"Content-Length: {HUGE}", "Content-Type: application/json"))
        sock.sendall(b"{" + b" " * 65536)  # a little of the body; the rest is never sent

        status, headers, body = read_response(sock)

    assert_refused(status, headers, body, limit)
    assert open_temp_files(web) == []


def test_expect_continue_gets_the_refusal_and_no_invitation_to_send(web):
    with connect(web) as sock:
        sock.sendall(head(MESSAGES, f"Content-Length: {HUGE}", "Expect: 100-continue"))

        status, headers, body = read_response(sock)

    assert_refused(status, headers, body, settings.API_MAX_BODY_BYTES)
    assert b"100 Continue" not in body


def test_a_client_sending_300_mb_anyway_is_cut_off_and_the_server_keeps_no_memory(web):
    before = rss_kib(web.web.pid)
    sent = 0
    with connect(web) as sock:
        sock.sendall(head(MESSAGES, f"Content-Length: {HUGE}"))
        piece = b"x" * (1024 * 1024)
        try:
            while sent < HUGE:
                sock.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection: it read no further

        status, headers, body = read_response(sock)

    assert_refused(status, headers, body, settings.API_MAX_BODY_BYTES)
    assert sent < 64 * 1024 * 1024  # what the sockets' buffers took, not the body
    assert rss_kib(web.web.pid) - before < 8 * 1024
    assert open_temp_files(web) == []


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def test_chunked_body_is_cut_at_the_limit_with_413(web):
    limit = settings.API_MAX_BODY_BYTES
    with connect(web) as sock:
        sock.sendall(head(MESSAGES, "Transfer-Encoding: chunked", "Content-Type: application/json"))
        sent = 0
        try:
            # Never finished (no terminating chunk): only the limit can end this request.
            while sent <= limit + 65536:
                sock.sendall(chunk(b" " * 16384))
                sent += 16384
        except (BrokenPipeError, ConnectionResetError):
            pass

        status, headers, body = read_response(sock)

    assert_refused(status, headers, body, limit)
    assert open_temp_files(web) == []


def test_each_path_has_its_own_limit(web):
    """The OpenAI-compatible /v1 takes 4 MiB (clients resend whole conversations), pages
    HTTP_MAX_BODY_BYTES, so one body size is refused on one path and read on another."""
    body = b"{" + b" " * (2 * 1024 * 1024) + b"}"
    answers = {}
    for path in ("/v1/chat/completions", "/accounts/login/", MESSAGES):
        connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
        # Refused while sending: the answer is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answers[path] = (response.status, response.read())
        connection.close()

    assert answers["/v1/chat/completions"][0] == 401  # read whole; refused for the missing key
    assert answers["/accounts/login/"][0] == 413
    assert json.loads(answers["/accounts/login/"][1])["error"]["limit_bytes"] == (
        settings.HTTP_MAX_BODY_BYTES
    )
    assert answers[MESSAGES][0] == 413


def test_a_percent_encoded_path_is_held_to_the_limit_of_the_path_it_decodes_to(web):
    with connect(web) as sock:
        sock.sendall(head("/%61pi/v1/messages", f"Content-Length: {1024 * 1024 - 1}"))

        status, headers, body = read_response(sock)

    assert_refused(status, headers, body, settings.API_MAX_BODY_BYTES)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_normal_api_post_under_the_limit_is_stored(web, owner, framing):
    _, raw_token = api_token_create(person=owner, name="tests")
    text = "long but allowed " * 10_000  # ~170 kB of a 256 KiB limit
    payload = json.dumps({"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": text})
    connection = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    headers = {"Authorization": f"Bearer {raw_token}", "Content-Type": "application/json"}
    if framing == "chunked":
        body = iter([payload[:50_000].encode(), payload[50_000:].encode()])
        connection.request("POST", MESSAGES, body, headers, encode_chunked=True)
    else:
        connection.request("POST", MESSAGES, payload.encode(), headers)
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()

    assert response.status == 201, answer
    assert Message.objects.get().text == text


def test_websocket_upgrade_reaches_the_application(web):
    """An upgrade has no body: it passes the server's check and reaches the chat consumer,
    which accepts and then closes with its own code for a visitor who is not logged in."""
    with connect(web) as sock:
        sock.sendall(
            "\r\n".join(
                [
                    "GET /ws/chats/web:room/ HTTP/1.1",
                    f"Host: 127.0.0.1:{web.port}",
                    f"Origin: http://127.0.0.1:{web.port}",
                    "Upgrade: websocket",
                    "Connection: Upgrade",
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                    "Sec-WebSocket-Version: 13",
                    "",
                    "",
                ]
            ).encode()
        )
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < 4:
            chunk_ = sock.recv(4096)
            assert chunk_, data
            data += chunk_

    response_head, _, frames = data.partition(b"\r\n\r\n")
    assert response_head.startswith(b"HTTP/1.1 101")
    assert frames[0] & 0x0F == 0x8  # a close frame
    assert int.from_bytes(frames[2:4], "big") == 4401  # the consumer's "log in first"


def test_the_openai_sdk_reads_the_refusal_while_it_is_still_sending(web):
    """A real client sending a 5 MiB conversation to /v1 (4 MiB): the server closes after the
    headers, and the SDK still reports the 413 and its message, not a broken connection."""
    import openai

    client = openai.OpenAI(base_url=f"{web.url}/v1", api_key="sk-not-checked", max_retries=0)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(
            model="hermes", messages=[{"role": "user", "content": "a" * (5 * 1024 * 1024)}]
        )

    assert refused.value.status_code == 413
    assert str(settings.OPENAI_API_MAX_BODY_BYTES) in refused.value.message
