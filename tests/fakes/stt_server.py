"""A fake OpenAI-compatible speech-to-text server: `POST /v1/audio/transcriptions` with a
multipart body (file, model, response_format, language), answered with a verbose_json body.

It reads what it is sent for real: the multipart form, and the file as a WAV (its duration
is recorded, a file that is not WAV is answered 400 as OpenAI would). What it "hears" is
the text a test gives it (`text`, `language`), or an HTTP error (`status`)."""

import io
import json
import threading
import wave
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler

from tests.fakes.http import FakeHTTPServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 - http.server's name
        fake: FakeSTT = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path != "/v1/audio/transcriptions":
            self._answer(404, {"error": {"message": "not found"}})
            return
        head = f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(head + body)
        fields, file_bytes = {}, None
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if name == "file":
                file_bytes = part.get_payload(decode=True)
            else:
                fields[name] = part.get_content().strip()
        try:
            with wave.open(io.BytesIO(file_bytes or b"")) as audio:
                seconds = audio.getnframes() / audio.getframerate()
        except (wave.Error, EOFError):
            self._answer(400, {"error": {"message": "Invalid file format."}})
            return
        with fake.lock:
            fake.requests.append(
                {
                    "fields": fields,
                    "seconds": seconds,
                    "authorization": self.headers.get("Authorization"),
                }
            )
        if fake.status != 200:
            self._answer(fake.status, {"error": {"message": "the server failed"}})
            return
        self._answer(
            200,
            {"text": fake.text, "language": fake.language, "duration": seconds, "segments": []},
        )


class FakeSTT:
    def __init__(self, *, text: str = "", language: str = "english", status: int = 200):
        self.text = text
        self.language = language
        self.status = status
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self._server = FakeHTTPServer(("127.0.0.1", 0), _Handler, fake=self)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "FakeSTT":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()

    def configure(self, settings, **overrides) -> None:
        settings.STT_BASE_URL = self.base_url
        settings.STT_MODEL = "fake-whisper"
        settings.STT_API_KEY = "stt-key"
        for name, value in overrides.items():
            setattr(settings, name, value)
