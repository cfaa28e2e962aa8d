"""Telegram Bot API's wire format, as the fake server (tests/fakes/telegram_server.py)
speaks it: the objects tests build updates from (users, chats, the entities a client
attaches), what the fake records (`BotMessage`, `Call`, `Upload`), Telegram's check of
parse_mode=HTML, and the HTTP side: parameters read as python-telegram-bot sends them (query,
form-encoded, JSON or multipart), a method's answer as JSON, and files served from
`/file/bot<token>/<file_path>`, stalling when the fake says so.
"""

import contextlib
import html
import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl

from tests.fakes.http import FakeHTTPServer

DEFAULT_TOKEN = "7654321:TEST-token-for-the-fake-server"
ALLOWED_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-emoji",
}
STRING_PARAMS = {
    "text",
    "caption",
    "parse_mode",
    "action",
    "callback_query_id",
    "url",
    "secret_token",
    "callback_data",
}
LIMIT = 4096
DOWNLOAD_LIMIT = 20 * 1024 * 1024  # what getFile hands a bot on api.telegram.org


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# --- building updates -------------------------------------------------------------------


def tg_user(user_id: int, first_name: str, *, username: str | None = None, **extra) -> dict:
    user = {"id": user_id, "is_bot": False, "first_name": first_name, **extra}
    if username:
        user["username"] = username
    return user


def private_chat(user: dict) -> dict:
    chat = {"id": user["id"], "type": "private", "first_name": user["first_name"]}
    if user.get("username"):
        chat["username"] = user["username"]
    return chat


def group_chat(chat_id: int, title: str, *, forum: bool = False) -> dict:
    chat = {"id": chat_id, "type": "supergroup", "title": title}
    if forum:
        chat["is_forum"] = True
    return chat


def _entities(text: str) -> list[dict]:
    """Entities the Telegram client would attach: a leading /command and @mentions."""
    entities = []
    position = 0
    for word in text.split(" "):
        offset = utf16_len(text[:position])
        if word.startswith("/") and position == 0 and len(word) > 1:
            entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(word)})
        elif word.startswith("@") and len(word) > 1:
            clean = word.rstrip(",.!?:;")
            entities.append({"type": "mention", "offset": offset, "length": utf16_len(clean)})
        position += len(word) + 1
    return entities


@dataclass
class BotMessage:
    """A message the bot sent, as the chat shows it now (with its edit history)."""

    chat_id: int
    message_id: int
    text: str
    parse_mode: str | None
    thread_id: int | None
    reply_to: int | None
    reply_markup: dict | None
    sent_at: float
    history: list[tuple[float, str, str | None]] = field(default_factory=list)

    @property
    def edits(self) -> int:
        return len(self.history) - 1


@dataclass
class Call:
    method: str
    params: dict
    at: float
    status: int = 200


# --- Telegram's HTML check --------------------------------------------------------------


class _HtmlCheck(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED_TAGS:
            self.error = self.error or f'unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.error = self.error or f'can\'t find end tag corresponding to start tag "{tag}"'
            return
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def check_html(text: str) -> tuple[str | None, str]:
    """(error or None, visible text) the way Telegram parses parse_mode=HTML."""
    if "<" in text.replace("&lt;", "") and text.count("<") != text.count(">"):
        return "Unexpected end of name token", text
    parser = _HtmlCheck()
    parser.feed(text)
    parser.close()
    if parser.error is None and parser.stack:
        parser.error = f'can\'t find end tag corresponding to start tag "{parser.stack[-1]}"'
    return parser.error, html.unescape("".join(parser.text))


def _decode(name: str, value: str):
    if name in STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


@dataclass
class Upload:
    """A file the bot uploaded: the multipart part's file name (UTF-8) and its bytes."""

    filename: str
    data: bytes
    content_type: str


def _multipart(content_type: str, raw: bytes) -> dict:
    """The fields of a multipart/form-data body: files as `Upload`, the rest decoded like
    form fields. File names are read as UTF-8 (what httpx sends for non-ASCII names)."""
    boundary = content_type.split("boundary=", 1)[1].split(";")[0].strip().strip('"')
    params: dict = {}
    for part in raw.split(b"--" + boundary.encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, body = part.partition(b"\r\n\r\n")
        body = body[:-2] if body.endswith(b"\r\n") else body
        headers = head.decode("utf-8").strip().split("\r\n")
        disposition = next(h for h in headers if h.lower().startswith("content-disposition"))
        fields = dict(
            (key.strip(), value.strip().strip('"'))
            for key, _, value in (item.partition("=") for item in disposition.split(";")[1:])
        )
        if "filename" in fields:
            kind = next(
                (
                    h.split(":", 1)[1].strip()
                    for h in headers
                    if h.lower().startswith("content-type")
                ),
                "",
            )
            params[fields["name"]] = Upload(fields["filename"], body, kind)
        else:
            params[fields["name"]] = _decode(fields["name"], body.decode("utf-8"))
    # Files attached by "attach://name" are named by the field that refers to them.
    for key, value in list(params.items()):
        if isinstance(value, str) and value.startswith("attach://"):
            params[key] = params.pop(value[len("attach://") :], value)
    return params


class _Server(FakeHTTPServer):
    fake: Any  # the FakeTelegram it serves (tests.fakes.telegram_server)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):
        pass

    def finish(self):
        with contextlib.suppress(OSError):
            super().finish()

    def _params(self) -> dict:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        query = self.path.partition("?")[2]
        params = {k: _decode(k, v) for k, v in parse_qsl(query)}
        content_type = self.headers.get("Content-Type", "")
        if "application/json" in content_type and raw:
            params.update(json.loads(raw))
        elif "multipart/form-data" in content_type:
            params.update(_multipart(content_type, raw))
        elif raw:
            params.update({k: _decode(k, v) for k, v in parse_qsl(raw.decode())})
        return params

    def _file(self, path: str) -> None:
        fake = self.server.fake
        data = fake.file_bytes(path)
        status, payload = (200, data) if data is not None else (404, b"Not Found")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if fake.download_stall and status == 200:
                # In `download_pieces` pieces, with a stall after each but the last.
                step = max(len(payload) // fake.download_pieces, 1)
                while len(payload) > step:
                    self.wfile.write(payload[:step])
                    self.wfile.flush()
                    payload = payload[step:]
                    if fake._stopping.wait(fake.download_stall):
                        break
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _answer(self):
        path = self.path.split("?", 1)[0]
        files = f"/file/bot{self.server.fake.token}/"
        if path.startswith(files):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return self._file(path[len(files) :])
        prefix = f"/bot{self.server.fake.token}/"
        if not path.startswith(prefix):
            status, body = 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        else:
            try:
                params = self._params()
            except ValueError as exc:
                status, body = 400, {"ok": False, "error_code": 400, "description": str(exc)}
            else:
                status, body = self.server.fake.handle(path[len(prefix) :], params)
        payload = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    do_GET = _answer
    do_POST = _answer
