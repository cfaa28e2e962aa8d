"""Bot API calls the hub makes outside the bridge's event loop (plain HTTP, synchronous).

The bridge sends through python-telegram-bot on its own loop; a few reads are needed where
an update is applied (a sync thread of the bridge, or the webhook view), and go through
here, so tests fake one server and errors never carry the bot's token.
"""

import httpx
from django.conf import settings

TIMEOUT_SECONDS = 5.0


class BotApiError(Exception):
    """The Bot API could not answer (network, HTTP or Telegram error); the message says why."""


def _call(method: str, params: dict) -> object:
    token = settings.TELEGRAM_BOT_TOKEN
    url = f"{settings.TELEGRAM_API_BASE_URL}/bot{token}/{method}"
    try:
        response = httpx.post(url, json=params, timeout=TIMEOUT_SECONDS)
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
