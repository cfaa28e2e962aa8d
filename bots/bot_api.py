"""Bot API calls the hub makes outside the bridge's event loop (plain HTTP, synchronous).

The bridge sends through python-telegram-bot on its own loop; a few reads are needed where
an update is applied (a sync thread of the bridge, or the webhook view), and go through
here, so tests fake one server and errors never carry the bot's token.
"""

import time

import httpx
from django.conf import settings

TIMEOUT_SECONDS = 5.0


class BotApiError(Exception):
    """The Bot API could not answer (network, HTTP or Telegram error); the message says why."""


def _call(method: str, params: dict, *, timeout: float = TIMEOUT_SECONDS) -> object:
    token = settings.TELEGRAM_BOT_TOKEN
    url = f"{settings.TELEGRAM_API_BASE_URL}/bot{token}/{method}"
    try:
        response = httpx.post(url, json=params, timeout=timeout)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        text = str(exc).replace(token, "<token>") if token else str(exc)
        raise BotApiError(f"{method}: {type(exc).__name__}: {text}"[:300]) from None
    if not isinstance(body, dict) or not body.get("ok"):
        described = body.get("description") if isinstance(body, dict) else None
        raise BotApiError(f"{method}: {described or f'HTTP {response.status_code}'}"[:300])
    return body.get("result")


def chat_administrators(telegram_chat_id: int) -> list[int]:
    """The user ids of a group's human administrators (its creator included), as Telegram
    lists them now (getChatAdministrators); BotApiError when it cannot say."""
    result = _call("getChatAdministrators", {"chat_id": telegram_chat_id})
    if not isinstance(result, list):
        raise BotApiError("getChatAdministrators: the answer is not a list")
    ids = []
    for member in result:
        user = member.get("user") if isinstance(member, dict) else None
        if not isinstance(user, dict) or user.get("is_bot"):
            continue
        if member.get("status") in ("creator", "administrator") and isinstance(user.get("id"), int):
            ids.append(user["id"])
    return ids


# A user in one of these states is in the group (a "restricted" one only with `is_member`).
IN_GROUP = ("creator", "administrator", "member")


def chat_member_status(telegram_chat_id: int, user_id: int) -> tuple[str, bool]:
    """What Telegram says now about `user_id` in the group (getChatMember): its status
    ("member", "left", "kicked", ...) and whether they are in the group. BotApiError when
    it cannot say."""
    result = _call("getChatMember", {"chat_id": telegram_chat_id, "user_id": user_id})
    if not isinstance(result, dict) or not isinstance(result.get("status"), str):
        raise BotApiError("getChatMember: the answer has no status")
    status = result["status"]
    inside = status in IN_GROUP or (status == "restricted" and bool(result.get("is_member")))
    return status, inside


# --- files -------------------------------------------------------------------------------

# What api.telegram.org lets a bot download (getFile); a local Bot API server
# (`telegram-bot-api --local`, TELEGRAM_API_BASE_URL) has no such limit.
CLOUD_DOWNLOAD_LIMIT = 20 * 1024 * 1024


class FileTooBig(BotApiError):
    """The Bot API refuses to hand this file to a bot (over its 20 MB download limit)."""


class FileOverLimit(BotApiError):
    """The file is larger than the caller's limit (read no further)."""


def uses_cloud_api() -> bool:
    """Whether files come from api.telegram.org (with its 20 MB limit) rather than a local
    Bot API server."""
    return settings.TELEGRAM_API_BASE_URL.rstrip("/") == "https://api.telegram.org"


def file_path_of(file_id: str, *, timeout: float = TIMEOUT_SECONDS) -> str:
    """Where the Bot API keeps a file (getFile's `file_path`): relative to the file URL, or
    an absolute path on a local Bot API server's disk. FileTooBig over its download limit."""
    try:
        result = _call("getFile", {"file_id": file_id}, timeout=timeout)
    except BotApiError as exc:
        if "file is too big" in str(exc).lower():
            raise FileTooBig(str(exc)) from None
        raise
    path = result.get("file_path") if isinstance(result, dict) else None
    if not isinstance(path, str) or not path:
        raise BotApiError("getFile: the answer has no file_path")
    return path


def file_download(file_path: str, *, limit: int, timeout: float) -> bytes:
    """The file's bytes, read at most to `limit` (FileOverLimit past it) within `timeout`
    seconds: from the file URL, or from the disk of a local Bot API server (an absolute
    `file_path`, which only such a server returns)."""
    if file_path.startswith("/"):
        return _read_local(file_path, limit)
    token = settings.TELEGRAM_BOT_TOKEN
    url = f"{settings.TELEGRAM_API_BASE_URL}/file/bot{token}/{file_path}"
    chunks, total = [], 0
    # `timeout` bounds each wait for bytes (httpx) and the whole download (here): a server
    # that drips its bytes is stopped too, after at most twice `timeout`.
    deadline = time.monotonic() + timeout
    try:
        with httpx.stream("GET", url, timeout=timeout) as response:
            if response.status_code != 200:
                raise BotApiError(f"file download: HTTP {response.status_code}")
            for chunk in response.iter_bytes():
                total += len(chunk)
                if total > limit:
                    raise FileOverLimit(f"the file is larger than {limit} bytes")
                if time.monotonic() > deadline:
                    raise BotApiError(f"file download: timed out after {timeout:g} s")
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        text = str(exc).replace(token, "<token>") if token else str(exc)
        raise BotApiError(f"file download: {type(exc).__name__}: {text}"[:300]) from None
    return b"".join(chunks)


def _read_local(path: str, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise BotApiError(f"file download: {exc.strerror or exc}"[:300]) from None
    if len(data) > limit:
        raise FileOverLimit(f"the file is larger than {limit} bytes")
    return data
