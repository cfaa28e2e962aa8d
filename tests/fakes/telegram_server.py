"""A fake Telegram Bot API server: real HTTP on loopback, the real wire format.

    with FakeTelegram() as tg:
        tg.configure(settings)                       # TELEGRAM_API_BASE_URL, TELEGRAM_BOT_TOKEN
        alice = tg_user(1001, "Alice")
        tg.send(private_chat(alice), alice, "hello")  # queued for getUpdates
        tg.wait_for(lambda: tg.bot_messages(1001))
        assert tg.bot_messages(1001)[-1].text == "..."

It answers the methods the bridge uses (getMe, getUpdates with offset/timeout long-poll
semantics, deleteWebhook, setWebhook, setMyCommands, sendMessage, editMessageText,
sendChatAction, answerCallbackQuery, getChatAdministrators of the groups given
`set_administrators`, getFile, sendDocument and sendPhoto) at `/bot<token>/<method>`, with
form-encoded, JSON or multipart parameters as python-telegram-bot sends them (an uploaded
file is an `Upload`: its UTF-8 file name and bytes, in the call's params), and the files
`add_file` holds at `/file/bot<token>/<file_path>` (getFile refuses a file over 20 MB as
Telegram does: "Bad Request: file is too big"; `download_stall` makes downloads stall
half-way, or drip in `download_pieces`). `photo`, `document`, `voice` and `video` build
media updates, in an album with `media_group_id`. Every call is recorded with a timestamp
(`calls`), and the messages the bot sent are kept as a chat would show them, with their
edit history. HTML is checked as Telegram does (known tags, balanced nesting, the
4,096-character limit on the visible text); `fail_next` scripts a 429 with
`parameters.retry_after`, a 400 "can't parse entities", or any other error.

The wire format (update builders, records, the HTML check, parameter parsing, the HTTP
handler) is tests/fakes/telegram_wire.py; every name tests use is importable from here.
"""

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import PurePosixPath

# The wire format lives in telegram_wire; tests import these names from here.
from tests.fakes.telegram_wire import (
    ALLOWED_TAGS,
    DEFAULT_TOKEN,
    DOWNLOAD_LIMIT,
    LIMIT,
    STRING_PARAMS,
    BotMessage,
    Call,
    Upload,
    _entities,
    _Handler,
    _Server,
    check_html,
    group_chat,
    private_chat,
    tg_user,
    utf16_len,
)

__all__ = [
    "ALLOWED_TAGS",
    "DEFAULT_TOKEN",
    "DOWNLOAD_LIMIT",
    "LIMIT",
    "STRING_PARAMS",
    "BotMessage",
    "Call",
    "FakeTelegram",
    "Upload",
    "check_html",
    "group_chat",
    "private_chat",
    "tg_user",
    "utf16_len",
]


# --- the server -------------------------------------------------------------------------


class FakeTelegram:
    def __init__(
        self,
        *,
        token: str = DEFAULT_TOKEN,
        username: str = "hermes_test_bot",
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.host, self._port = host, port
        self.calls: list[Call] = []
        self.messages: dict[tuple[int, int], BotMessage] = {}
        self.webhook: dict | None = None
        self.administrators: dict[int, list[dict]] = {}  # group id -> ChatMember objects
        # (group id, user id) -> status as getChatMember says it; everyone is a "member" of
        # every group until `leave` or `ban` says otherwise.
        self.member_status: dict[tuple[int, int], str] = {}
        self.check_html = True
        self._updates: list[dict] = []  # not yet confirmed, in update_id order
        self._redeliver: list[dict] = []
        self._update_ids = itertools.count(500_000)
        self._message_ids: dict[int, itertools.count] = {}
        self._chats: dict[int, dict] = {}
        self._failures: list[tuple[str, Callable[[dict], bool] | None, int, dict]] = []
        # file_id -> (file_unique_id, file_path, size, bytes or None for a file never served)
        self.files: dict[str, tuple[str, str, int, bytes | None]] = {}
        self.downloads: list[str] = []  # file paths downloaded, in order
        # Seconds a download stalls after each of its first pieces (a slow Telegram): one
        # stall after the first half by default; more pieces make it drip.
        self.download_stall = 0.0
        self.download_pieces = 2
        self._file_ids = itertools.count(1)
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._server: _Server | None = None

    # lifecycle

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self._server.server_address[1]}"

    @property
    def bot_user(self) -> dict:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Hermes",
            "username": self.username,
        }

    def start(self) -> "FakeTelegram":
        self._server = _Server((self.host, self._port), _Handler, fake=self)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()

    def __enter__(self) -> "FakeTelegram":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def configure(self, settings) -> None:
        settings.TELEGRAM_BOT_TOKEN = self.token
        settings.TELEGRAM_API_BASE_URL = self.base_url

    def env(self) -> dict[str, str]:
        return {"TELEGRAM_BOT_TOKEN": self.token, "TELEGRAM_API_BASE_URL": self.base_url}

    # updates

    def next_message_id(self, chat_id: int) -> int:
        with self._lock:
            counter = self._message_ids.setdefault(chat_id, itertools.count(1))
            return next(counter)

    def push(self, update: dict) -> dict:
        """Queue an update (an `update_id` is assigned when it has none); returns it."""
        with self._lock:
            if "update_id" not in update:
                update = {"update_id": next(self._update_ids), **update}
            self._updates.append(update)
            self._lock.notify_all()
        return update

    def redeliver(self, update: dict) -> None:
        """Deliver an update again on the next getUpdates, whatever the offset says (what
        Telegram does when a confirmation was lost)."""
        with self._lock:
            self._redeliver.append(update)
            self._lock.notify_all()

    def pending_updates(self) -> int:
        with self._lock:
            return len(self._updates) + len(self._redeliver)

    def message(
        self,
        chat: dict,
        sender: dict,
        text: str | None = None,
        *,
        thread_id: int | None = None,
        topic_name: str = "Topic",
        reply_to: dict | None = None,
        caption: str | None = None,
        photo: bool = False,
        extra: dict | None = None,
    ) -> dict:
        """A message update as Telegram builds it (message id, date, entities, topic reply)."""
        self._chats[chat["id"]] = chat
        data = {
            "message_id": self.next_message_id(chat["id"]),
            "from": sender,
            "chat": chat,
            "date": int(time.time()),
        }
        if text is not None:
            data["text"] = text
            entities = _entities(text)
            if entities:
                data["entities"] = entities
        if photo:
            data["photo"] = [
                {"file_id": "small-id", "file_unique_id": "s1", "width": 90, "height": 60},
                {
                    "file_id": "large-id",
                    "file_unique_id": "l1",
                    "width": 1280,
                    "height": 853,
                    "file_size": 123456,
                },
            ]
        if caption is not None:
            data["caption"] = caption
            caption_entities = _entities(caption)
            if caption_entities:
                data["caption_entities"] = caption_entities
        if thread_id is not None:
            data["message_thread_id"] = thread_id
            data["is_topic_message"] = True
            data["reply_to_message"] = reply_to or {
                "message_id": thread_id,
                "from": sender,
                "chat": chat,
                "date": int(time.time()) - 3600,
                "message_thread_id": thread_id,
                "is_topic_message": True,
                "forum_topic_created": {"name": topic_name, "icon_color": 7322096},
            }
        elif reply_to is not None:
            data["reply_to_message"] = reply_to
        data.update(extra or {})
        return {"update_id": next(self._update_ids), "message": data}

    # files

    def add_file(self, data: bytes | None, *, size: int | None = None, suffix: str = "") -> dict:
        """Hold a file as Telegram would (getFile + download); `data=None` with a `size`: a file
        too big to serve. Returns its `file_id`, `file_unique_id` and `file_size`."""
        number = next(self._file_ids)
        file_id, unique = f"file-{number}-id", f"u{number}"
        size = len(data) if data is not None else int(size or 0)
        folder = {".jpg": "photos", ".oga": "voice"}.get(suffix, "documents")
        with self._lock:
            self.files[file_id] = (unique, f"{folder}/file_{number}{suffix}", size, data)
        return {"file_id": file_id, "file_unique_id": unique, "file_size": size}

    def photo(
        self,
        chat: dict,
        sender: dict,
        large: bytes,
        *,
        small: bytes = b"small thumbnail",
        caption: str | None = None,
        media_group_id: str | None = None,
    ) -> dict:
        """A photo update: Telegram lists its sizes, the largest last."""
        sizes = [
            {**self.add_file(small, suffix=".jpg"), "width": 90, "height": 60},
            {**self.add_file(large, suffix=".jpg"), "width": 1280, "height": 853},
        ]
        extra = {"photo": sizes}
        if media_group_id:
            extra["media_group_id"] = media_group_id
        return self.message(chat, sender, None, caption=caption, extra=extra)

    def document(
        self,
        chat: dict,
        sender: dict,
        data: bytes | None,
        file_name: str,
        *,
        mime_type: str = "application/octet-stream",
        size: int | None = None,
        caption: str | None = None,
        media_group_id: str | None = None,
    ) -> dict:
        """A document update (`data=None` and a `size`: a file getFile refuses)."""
        document = {
            **self.add_file(data, size=size, suffix=PurePosixPath(file_name).suffix),
            "file_name": file_name,
            "mime_type": mime_type,
        }
        extra = {"document": document}
        if media_group_id:
            extra["media_group_id"] = media_group_id
        return self.message(chat, sender, None, caption=caption, extra=extra)

    def voice(
        self,
        chat: dict,
        sender: dict,
        data: bytes | None,
        *,
        duration: int = 3,
        size: int | None = None,
        caption: str | None = None,
        reply_to: dict | None = None,
        kind: str = "voice",
    ) -> dict:
        """A voice note (`kind="voice"`, OGG/Opus, no file name), an audio file ("audio") or
        a video note ("video_note"), as Telegram describes them."""
        suffix = {"voice": ".oga", "audio": ".mp3", "video_note": ".mp4"}[kind]
        media = {**self.add_file(data, size=size, suffix=suffix), "duration": duration}
        if kind == "voice":
            media["mime_type"] = "audio/ogg"
        elif kind == "audio":
            media.update(mime_type="audio/mpeg", file_name="talk.mp3", title="Talk")
        else:
            media["length"] = 240
        return self.message(
            chat, sender, None, caption=caption, reply_to=reply_to, extra={kind: media}
        )

    def video(
        self,
        chat: dict,
        sender: dict,
        data: bytes | None,
        *,
        file_name: str | None = "clip.mp4",
        duration: int = 3,
        size: int | None = None,
        caption: str | None = None,
    ) -> dict:
        """A video (not a video note), as Telegram describes one sent as a video: MP4,
        its picture's size, its duration, usually a file name."""
        media = {
            **self.add_file(data, size=size, suffix=".mp4"),
            "width": 640,
            "height": 360,
            "duration": duration,
            "mime_type": "video/mp4",
        }
        if file_name:
            media["file_name"] = file_name
        return self.message(chat, sender, None, caption=caption, extra={"video": media})

    def send(self, chat: dict, sender: dict, text: str | None = None, **kwargs) -> dict:
        """Build a message update and queue it; returns the update (with its update_id)."""
        return self.push(self.message(chat, sender, text, **kwargs))

    def press(self, presser: dict, bot_message: BotMessage, data: str) -> dict:
        """Queue a callback query: `presser` pressed a button of `bot_message`."""
        chat = self._chats.get(bot_message.chat_id) or {
            "id": bot_message.chat_id,
            "type": "private",
        }
        return self.push(
            {
                "callback_query": {
                    "id": f"cq-{next(self._update_ids)}",
                    "from": presser,
                    "chat_instance": "ci-1",
                    "data": data,
                    "message": {
                        "message_id": bot_message.message_id,
                        "from": self.bot_user,
                        "chat": chat,
                        "date": int(bot_message.sent_at),
                        "text": bot_message.text,
                    },
                }
            }
        )

    def bot_reply_to(self, bot_message: BotMessage) -> dict:
        """`reply_to_message` of a user's reply to one of the bot's messages."""
        return {
            "message_id": bot_message.message_id,
            "from": self.bot_user,
            "chat": self._chats.get(bot_message.chat_id, {"id": bot_message.chat_id}),
            "date": int(bot_message.sent_at),
            "text": bot_message.text,
        }

    def set_administrators(self, chat_id: int, users: list[dict], *, creator: dict | None = None):
        """The group's administrators as getChatAdministrators lists them from now on."""
        members = [{"status": "creator", "user": creator, "is_anonymous": False}] if creator else []
        members += [
            {"status": "administrator", "user": user, "can_be_edited": False, "is_anonymous": False}
            for user in users
        ]
        with self._lock:
            self.administrators[chat_id] = members

    def join(self, chat_id: int, user_id: int) -> None:
        """The user is in the group from now on (getChatMember: "member")."""
        with self._lock:
            self.member_status[(chat_id, user_id)] = "member"

    def leave(self, chat_id: int, user_id: int) -> None:
        """The user left the group (getChatMember: "left")."""
        with self._lock:
            self.member_status[(chat_id, user_id)] = "left"

    def ban(self, chat_id: int, user_id: int) -> None:
        """An admin banned the user from the group (getChatMember: "kicked")."""
        with self._lock:
            self.member_status[(chat_id, user_id)] = "kicked"

    # scripted failures

    def fail_next(
        self,
        method: str,
        *,
        status: int = 400,
        description: str = "Bad Request",
        retry_after: int | None = None,
        when: Callable[[dict], bool] | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` calls of `method` (matching `when`) fail with this error."""
        body = {"ok": False, "error_code": status, "description": description}
        if retry_after is not None:
            body["parameters"] = {"retry_after": retry_after}
        with self._lock:
            self._failures.append((method, when, times, body))

    def _scripted_failure(self, method: str, params: dict) -> dict | None:
        with self._lock:
            for index, (name, when, times, body) in enumerate(self._failures):
                if name == method and (when is None or when(params)):
                    if times <= 1:
                        del self._failures[index]
                    else:
                        self._failures[index] = (name, when, times - 1, body)
                    return body
        return None

    # what the bot did

    def calls_of(self, method: str) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.method == method]

    def bot_messages(self, chat_id: int, thread_id: int | None = None) -> list[BotMessage]:
        with self._lock:
            found = [m for m in self.messages.values() if m.chat_id == chat_id]
        if thread_id is not None:
            found = [m for m in found if m.thread_id == thread_id]
        return sorted(found, key=lambda m: m.message_id)

    def wait_for(self, predicate: Callable[[], object], timeout: float = 30.0, what: str = ""):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what or predicate}")

    # request handling (called from the handler threads)

    def _record(self, method: str, params: dict) -> Call:
        call = Call(method, params, time.monotonic())
        with self._lock:
            self.calls.append(call)
        return call

    def _chat(self, chat_id: int) -> dict:
        return self._chats.get(chat_id) or {
            "id": chat_id,
            "type": "private" if chat_id > 0 else "supergroup",
            **({"first_name": "User"} if chat_id > 0 else {"title": "Group"}),
        }

    def handle(self, method: str, params: dict) -> tuple[int, dict]:
        call = self._record(method, params)
        failure = self._scripted_failure(method, params)
        if failure is not None:
            call.status = failure["error_code"]
            return failure["error_code"], failure
        status, body = self._dispatch(method, params)
        call.status = status
        return status, body

    def _error(self, description: str, status: int = 400) -> tuple[int, dict]:
        return status, {"ok": False, "error_code": status, "description": description}

    def _ok(self, result) -> tuple[int, dict]:
        return 200, {"ok": True, "result": result}

    def _dispatch(self, method: str, params: dict) -> tuple[int, dict]:
        if method == "getMe":
            return self._ok(
                {**self.bot_user, "can_join_groups": True, "supports_inline_queries": False}
            )
        if method == "getUpdates":
            return self._ok(self._get_updates(params))
        if method in ("deleteWebhook", "setMyCommands", "sendChatAction", "answerCallbackQuery"):
            if method == "deleteWebhook":
                self.webhook = None
            return self._ok(True)
        if method == "setWebhook":
            self.webhook = params
            return self._ok(True)
        if method == "getWebhookInfo":
            return self._ok(
                {
                    "url": (self.webhook or {}).get("url", ""),
                    "pending_update_count": 0,
                    "has_custom_certificate": False,
                }
            )
        if method == "getChatAdministrators":
            with self._lock:
                found = self.administrators.get(int(params.get("chat_id", 0)))
            return (
                self._ok(found) if found is not None else self._error("Bad Request: chat not found")
            )
        if method == "getChatMember":
            return self._chat_member(params)
        if method == "getFile":
            return self._get_file(params)
        if method == "sendMessage":
            return self._send_message(params)
        if method == "editMessageText":
            return self._edit_message(params)
        if method in ("sendDocument", "sendPhoto"):
            return self._send_file(method, params)
        return self._error(f"Not Found: method {method} is not faked", 404)

    def _get_file(self, params: dict) -> tuple[int, dict]:
        with self._lock:
            found = self.files.get(str(params.get("file_id", "")))
        if found is None:
            return self._error("Bad Request: invalid file_id")
        unique, path, size, _ = found
        if size > DOWNLOAD_LIMIT:
            return self._error("Bad Request: file is too big")
        return self._ok(
            {
                "file_id": params["file_id"],
                "file_unique_id": unique,
                "file_size": size,
                "file_path": path,
            }
        )

    def file_bytes(self, path: str) -> bytes | None:
        """The bytes served at `/file/bot<token>/<path>` (recorded as a download)."""
        with self._lock:
            for _, file_path, size, data in self.files.values():
                if file_path == path and size <= DOWNLOAD_LIMIT:
                    self.downloads.append(path)
                    return data
        return None

    def _chat_member(self, params: dict) -> tuple[int, dict]:
        try:
            chat_id, user_id = int(params.get("chat_id")), int(params.get("user_id"))
        except (TypeError, ValueError):
            return self._error("Bad Request: invalid user_id specified")
        with self._lock:
            status = self.member_status.get((chat_id, user_id), "member")
        user = {"id": user_id, "is_bot": False, "first_name": "User"}
        member = {"status": status, "user": user}
        if status == "kicked":
            member["until_date"] = 0
        return self._ok(member)

    def _check_text(self, params: dict) -> str | None:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            return "Bad Request: message text is empty"
        visible = text
        if params.get("parse_mode") == "HTML" and self.check_html:
            error, visible = check_html(text)
            if error:
                return f"Bad Request: can't parse entities: {error}"
        if utf16_len(visible) > LIMIT:
            return "Bad Request: message is too long"
        return None

    def _message_json(self, message: BotMessage) -> dict:
        data = {
            "message_id": message.message_id,
            "from": self.bot_user,
            "chat": self._chat(message.chat_id),
            "date": int(message.sent_at),
            "text": message.text,
        }
        if message.thread_id is not None:
            data["message_thread_id"] = message.thread_id
            data["is_topic_message"] = True
        return data

    def _send_message(self, params: dict) -> tuple[int, dict]:
        error = self._check_text(params)
        if error:
            return self._error(error)
        chat_id = int(params["chat_id"])
        reply = params.get("reply_parameters") or {}
        thread = params.get("message_thread_id")
        now = time.time()
        message = BotMessage(
            chat_id=chat_id,
            message_id=self.next_message_id(chat_id),
            text=params["text"],
            parse_mode=params.get("parse_mode"),
            thread_id=int(thread) if thread is not None else None,
            reply_to=reply.get("message_id") if isinstance(reply, dict) else None,
            reply_markup=params.get("reply_markup"),
            sent_at=now,
            history=[(time.monotonic(), params["text"], params.get("parse_mode"))],
        )
        with self._lock:
            self.messages[(chat_id, message.message_id)] = message
        return self._ok(self._message_json(message))

    def _send_file(self, method: str, params: dict) -> tuple[int, dict]:
        """A document or photo: stored as a message whose text is its caption (or "")."""
        field_name = "photo" if method == "sendPhoto" else "document"
        upload = params.get(field_name)
        if not isinstance(upload, Upload):
            return self._error(f"Bad Request: there is no {field_name} in the request")
        chat_id = int(params["chat_id"])
        thread = params.get("message_thread_id")
        message = BotMessage(
            chat_id=chat_id,
            message_id=self.next_message_id(chat_id),
            text=params.get("caption") or "",
            parse_mode=params.get("parse_mode"),
            thread_id=int(thread) if thread is not None else None,
            reply_to=None,
            reply_markup=None,
            sent_at=time.time(),
        )
        with self._lock:
            self.messages[(chat_id, message.message_id)] = message
        data = self._message_json(message)
        if method == "sendPhoto":
            data["photo"] = [
                {
                    "file_id": f"photo-{message.message_id}",
                    "file_unique_id": "p",
                    "width": 1,
                    "height": 1,
                    "file_size": len(upload.data),
                }
            ]
        else:
            data["document"] = {
                "file_id": f"doc-{message.message_id}",
                "file_unique_id": "d",
                "file_name": upload.filename,
                "file_size": len(upload.data),
            }
        return self._ok(data)

    def _edit_message(self, params: dict) -> tuple[int, dict]:
        key = (int(params.get("chat_id", 0)), int(params.get("message_id", 0)))
        with self._lock:
            message = self.messages.get(key)
        if message is None:
            return self._error("Bad Request: message to edit not found")
        error = self._check_text(params)
        if error:
            return self._error(error)
        markup = params.get("reply_markup")
        if (
            message.text == params["text"]
            and message.parse_mode == params.get("parse_mode")
            and markup == message.reply_markup
        ):
            return self._error(
                "Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup of "
                "the message"
            )
        with self._lock:
            message.text = params["text"]
            message.parse_mode = params.get("parse_mode")
            message.reply_markup = markup
            message.history.append((time.monotonic(), message.text, message.parse_mode))
        return self._ok(self._message_json(message))

    def _get_updates(self, params: dict) -> list[dict]:
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if offset:
                    # Everything below the offset is confirmed: Telegram forgets it.
                    self._updates = [u for u in self._updates if u["update_id"] >= offset]
                ready = self._redeliver + self._updates
                if ready or self._stopping.is_set():
                    self._redeliver = []
                    return ready[:limit]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._lock.wait(min(remaining, 0.5))
