"""What a client of the running stack does: post through the HTTP API, read turns back."""

import json
import time
import urllib.error
import urllib.request

from chats.models import Turn

FINISHED = {"completed", "failed", "interrupted"}


def post_message(base_url: str, token: str, *, chat_id: str, message_id: str, text: str):
    """POST /api/v1/messages; returns (status, body) for any answer, errors included."""
    request = urllib.request.Request(
        f"{base_url}/api/v1/messages",
        data=json.dumps(
            {"chat_id": chat_id, "user_id": "u1", "message_id": message_id, "text": text}
        ).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, {"raw": body.decode(errors="replace")}


def wait_for_turn(turn_id: int, statuses, timeout: float) -> Turn:
    """The turn once its status is one of `statuses`; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        turn = Turn.objects.get(pk=turn_id)
        if turn.status in statuses:
            return turn
        if time.monotonic() > deadline:
            raise AssertionError(f"turn {turn_id} is still {turn.status} after {timeout:.0f} s")
        time.sleep(0.1)
