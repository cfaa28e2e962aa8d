"""HTTP API v1: authentication, posting messages, reading chats and history, search, errors.

Every bad request must be answered with its JSON error and store nothing, so those tests
compare the Chat/Message/Actor counts before and after.
"""

import json
import logging
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.test.client import AsyncClientHandler, FakePayload
from django.utils import timezone

from chats import ratelimit
from chats.models import Actor, ApiToken, Chat, ChatKind, ChatMember, Message
from chats.selectors import chat_role
from chats.services import (
    api_token_create,
    api_token_revoke,
    chat_member_ensure,
    message_ingest,
)
from tests.conftest import ApiClient

pytestmark = [pytest.mark.django_db, pytest.mark.storage]

MESSAGES = "/api/v1/messages"
CHATS = "/api/v1/chats"
SEARCH = "/api/v1/search"


def stored():
    return {
        "chats": Chat.objects.count(),
        "messages": Message.objects.count(),
        "actors": Actor.objects.count(),
        "members": ChatMember.objects.count(),
    }


def message(**fields):
    payload = {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "hello there"}
    payload.update(fields)
    return payload


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    return error


def history_url(chat_key_in_url):
    return f"{CHATS}/{chat_key_in_url}/messages"


# --- authentication -----------------------------------------------------------------------


def test_no_token_is_401_with_bearer_challenge_and_stores_nothing(team_chat):
    before = stored()
    anonymous = ApiClient(None)
    response = anonymous.post(MESSAGES, message())
    assert_error(response, 401, "missing_token")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert stored() == before
    # Reads too: a JSON 401, never a redirect to the login page.
    assert_error(anonymous.get(CHATS), 401, "missing_token")


@pytest.mark.parametrize(
    "header", ["Bearer hh_not-a-real-token", "Basic b2xpdmlhOnB3", "Bearer", "Token abc"]
)
def test_invalid_authorization_header_is_401(owner, header):
    before = stored()
    response = ApiClient(None).post(MESSAGES, message(), headers={"Authorization": header})
    assert_error(response, 401, "invalid_token")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert stored() == before


def test_revoked_token_stops_working(owner):
    token, raw = api_token_create(person=owner, name="laptop")
    api = ApiClient(raw)
    assert api.get(CHATS).status_code == 200
    api_token_revoke(token=token)
    response = api.get(CHATS)
    assert_error(response, 401, "invalid_token")
    assert "Bearer" in response["WWW-Authenticate"]


def test_token_of_inactive_person_is_refused(owner, api_for):
    api = api_for(owner)
    owner.is_active = False
    owner.save()
    before = stored()
    assert_error(api.post(MESSAGES, message()), 401, "invalid_token")
    assert stored() == before


def test_last_used_at_is_recorded_at_most_once_a_minute(owner):
    token, raw = api_token_create(person=owner)
    api = ApiClient(raw)
    assert token.last_used_at is None

    api.get(CHATS)
    first_use = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first_use is not None

    recent = timezone.now() - timedelta(seconds=30)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=recent)
    api.get(CHATS)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == recent

    stale = timezone.now() - timedelta(minutes=2)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=stale)
    api.get(CHATS)
    assert ApiToken.objects.get(pk=token.pk).last_used_at > recent


def test_api_needs_no_csrf_token_and_ignores_the_session_cookie(owner):
    _, raw = api_token_create(person=owner)
    browser = Client(enforce_csrf_checks=True)
    response = browser.post(
        MESSAGES,
        json.dumps(message()),
        content_type="application/json",
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code == 201

    # A logged-in browser session is not an API credential.
    browser.force_login(owner)
    assert_error(browser.get(CHATS), 401, "missing_token")


# --- POST /messages -----------------------------------------------------------------------


def test_post_creates_the_chat_with_the_poster_as_owner(owner, api_for):
    api = api_for(owner)
    response = api.post(MESSAGES, message(chat_title="Support desk", respond=True))

    assert response.status_code == 201
    body = response.json()
    assert body["chat_key"] == "api:c1"
    assert body["duplicate"] is False
    stored_message = Message.objects.get()
    assert body["message"] == {
        "id": stored_message.pk,
        "message_id": "m1",
        "role": "user",
        "text": "hello there",
        "author": {"user_id": "u1", "name": "u1"},
        "ts": body["message"]["stored_at"],
        "stored_at": body["message"]["stored_at"],
        "token_count": stored_message.token_count,
        "attachments": [],  # what the attachments app hangs on it (chats.extras)
    }
    assert stored_message.token_count > 0
    chat = Chat.objects.get()
    assert chat.title == "Support desk" and chat.kind == ChatKind.API
    assert chat_role(owner, chat) == ChatMember.Role.OWNER


def test_post_keeps_the_given_author_name_and_timestamp(owner, api_for):
    response = api_for(owner).post(
        MESSAGES, message(user_name="Ada Lovelace", ts="2026-01-02T03:04:05+00:00")
    )
    assert response.status_code == 201
    body = response.json()["message"]
    assert body["author"] == {"user_id": "u1", "name": "Ada Lovelace"}
    assert body["ts"] == "2026-01-02T03:04:05Z"
    assert body["stored_at"] != body["ts"]


def test_identical_posts_store_one_row_and_the_second_says_duplicate(owner, api_for):
    api = api_for(owner)
    first = api.post(MESSAGES, message())
    second = api.post(MESSAGES, message())

    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json()["duplicate"] is True
    assert second.json()["message"]["id"] == first.json()["message"]["id"]
    assert Message.objects.count() == 1


def test_three_users_of_one_group_share_one_chat_each_with_their_author(owner, api_for):
    api = api_for(owner)
    for user_id, name in [("101", "Ann"), ("102", "Bob"), ("103", "Cai 蔡")]:
        response = api.post(
            MESSAGES,
            {
                "chat_id": "-1001",
                "chat_kind": "group",
                "user_id": user_id,
                "user_name": name,
                "message_id": f"msg-{user_id}",
                "text": f"hi from {name}",
            },
        )
        assert response.status_code == 201

    assert Chat.objects.count() == 1
    assert Actor.objects.count() == 3
    history = api.get(history_url("api:-1001")).json()["messages"]
    assert [(m["author"]["name"], m["text"]) for m in history] == [
        ("Ann", "hi from Ann"),
        ("Bob", "hi from Bob"),
        ("Cai 蔡", "hi from Cai 蔡"),
    ]
    assert Chat.objects.get().kind == ChatKind.GROUP


def test_forum_topic_gets_its_own_chat_key(owner, api_for):
    api = api_for(owner)
    response = api.post(MESSAGES, message(chat_id=-100, thread_id=7))
    assert response.status_code == 201
    assert response.json()["chat_key"] == "api:-100:topic:7"
    assert Chat.objects.get().kind == ChatKind.TOPIC
    assert api.get(history_url("api:-100:topic:7")).status_code == 200


@pytest.fixture
def api_chat(owner, member, api_for):
    """An API conversation created by `owner`'s integration, with `member` added to it."""
    response = api_for(owner).post(MESSAGES, message(chat_id="shared", chat_title="Shared"))
    chat = Chat.objects.get(chat_key=response.json()["chat_key"])
    chat_member_ensure(chat=chat, person=member)
    return chat


def test_member_can_post_into_an_existing_chat(member, api_chat, api_for):
    response = api_for(member).post(MESSAGES, message(chat_id="shared", message_id="m2"))
    assert response.status_code == 201
    assert response.json()["chat_key"] == api_chat.chat_key
    assert chat_role(member, api_chat) == ChatMember.Role.MEMBER  # not promoted


def test_outsider_cannot_post_into_someone_elses_chat(outsider, api_chat, api_for):
    before = stored()
    response = api_for(outsider).post(
        MESSAGES, message(chat_id="shared", message_id="m2", chat_title="Pwned")
    )
    assert_error(response, 403, "not_a_member")
    assert stored() == before
    api_chat.refresh_from_db()
    assert api_chat.title == "Shared"
    assert chat_role(outsider, api_chat) is None


BAD_BODIES = [
    pytest.param(b"{not json", "malformed_json", id="malformed-json"),
    pytest.param(b"", "malformed_json", id="empty-body"),
    pytest.param(b'{"chat_id": "c1", "text": NaN}', "malformed_json", id="nan"),
    pytest.param(b'["c1", "u1", "m1", "hello"]', "invalid_body", id="array"),
    pytest.param(b'"hello"', "invalid_body", id="string"),
    pytest.param(
        b'{"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "caf\xe9"}',
        "invalid_encoding",
        id="latin-1-bytes",
    ),
]


@pytest.mark.parametrize("body, code", BAD_BODIES)
def test_malformed_body_is_400_and_stores_nothing(owner, api_for, body, code):
    before = stored()
    assert_error(api_for(owner).post(MESSAGES, body=body), 400, code)
    assert stored() == before


BAD_FIELDS = [
    pytest.param({"text": 42}, "text", id="text-number"),
    pytest.param({"text": "a\x00b"}, "text", id="text-nul"),
    pytest.param({"text": "   "}, "text", id="text-blank"),
    pytest.param({"chat_id": ["a"]}, "chat_id", id="chat-id-list"),
    pytest.param({"chat_id": True}, "chat_id", id="chat-id-bool"),
    pytest.param({"chat_id": "x" * 256}, "chat_id", id="chat-id-too-long"),
    pytest.param({"chat_id": "\ud800"}, "chat_id", id="chat-id-lone-surrogate"),
    pytest.param({"user_id": ""}, "user_id", id="user-id-empty"),
    pytest.param({"user_id": 1.5}, "user_id", id="user-id-float"),
    pytest.param({"message_id": {"id": 1}}, "message_id", id="message-id-object"),
    pytest.param({"user_name": True}, "user_name", id="user-name-bool"),
    pytest.param({"user_name": "bob\x00"}, "user_name", id="user-name-nul"),
    pytest.param({"chat_title": 5}, "chat_title", id="title-number"),
    pytest.param({"thread_id": "7\n8"}, "thread_id", id="thread-control-char"),
    pytest.param({"channel": "Tele gram"}, "channel", id="channel-bad-alphabet"),
    pytest.param({"channel": "myspace"}, "channel", id="channel-unknown"),
    pytest.param({"channel": 1}, "channel", id="channel-number"),
    pytest.param({"chat_kind": "forum"}, "chat_kind", id="kind-unknown"),
    pytest.param({"respond": "yes"}, "respond", id="respond-string"),
    pytest.param({"ts": "yesterday"}, "ts", id="ts-not-iso"),
    # Refused by chats.services.message_ingest itself (IngestError), after the API created
    # the chat: the chat must be rolled back with it.
    pytest.param({"ts": "2026-01-02T03:04:05"}, "ts", id="ts-naive"),
]


@pytest.mark.parametrize("fields, field", BAD_FIELDS)
def test_invalid_field_is_400_naming_the_field_and_stores_nothing(owner, api_for, fields, field):
    before = stored()
    error = assert_error(api_for(owner).post(MESSAGES, message(**fields)), 400, "invalid_field")
    assert field in error["message"]
    assert error["field"] == field
    assert stored() == before


@pytest.mark.parametrize("field", ["chat_id", "user_id", "message_id", "text"])
def test_missing_required_field_is_400(owner, api_for, field):
    payload = message()
    del payload[field]
    before = stored()
    error = assert_error(api_for(owner).post(MESSAGES, payload), 400, "missing_field")
    assert field in error["message"]
    assert stored() == before


def test_misspelt_field_is_refused_instead_of_ignored(owner, api_for):
    before = stored()
    error = assert_error(api_for(owner).post(MESSAGES, message(thread="7")), 400, "unknown_field")
    assert "thread" in error["message"]
    assert stored() == before


# --- body size ----------------------------------------------------------------------------


def test_body_over_the_limit_is_413_and_a_body_under_it_is_stored(owner, api_for, settings):
    settings.API_MAX_BODY_BYTES = 2048
    api = api_for(owner)
    before = stored()
    assert_error(api.post(MESSAGES, message(text="x" * 3000)), 413, "payload_too_large")
    assert stored() == before
    assert api.post(MESSAGES, message(text="x" * 1500)).status_code == 201


def test_body_past_djangos_read_limit_is_413_not_an_html_400(owner, api_for, settings):
    settings.API_MAX_BODY_BYTES = 10_000_000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    before = stored()
    response = api_for(owner).post(MESSAGES, message(text="x" * 3000))
    assert_error(response, 413, "payload_too_large")
    assert stored() == before


def test_chunked_body_without_content_length_is_413(owner, settings):
    """Over ASGI a client may stream a body without Content-Length: the read is bounded."""
    settings.API_MAX_BODY_BYTES = 2048
    _, raw = api_token_create(person=owner)
    body = json.dumps(message(text="x" * 5000)).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": MESSAGES,
        "raw_path": MESSAGES.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {raw}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
        "_body_file": FakePayload(body),
    }
    before = stored()
    response = async_to_sync(AsyncClientHandler(enforce_csrf_checks=True).__call__)(scope)
    assert response.status_code == 413
    assert json.loads(response.content)["error"]["code"] == "payload_too_large"
    assert stored() == before


# --- methods and unknown paths ------------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("GET", MESSAGES, "POST"),
        ("POST", CHATS, "GET"),
        ("DELETE", history_url("api:c1"), "GET"),
        ("PUT", SEARCH, "GET"),
    ],
)
def test_wrong_method_is_405_with_allow(owner, api_for, method, path, allow):
    before = stored()
    response = api_for(owner).generic(method, path, body=json.dumps(message()).encode())
    assert_error(response, 405, "method_not_allowed")
    assert response["Allow"] == allow
    assert stored() == before


@pytest.mark.parametrize(
    "method, path", [("GET", "/api/v1/nope"), ("POST", "/api/v1/"), ("GET", f"{CHATS}/")]
)
def test_unknown_api_path_is_a_json_404(owner, api_for, method, path):
    response = api_for(owner).generic(method, path)
    assert_error(response, 404, "not_found")


# --- rate limit ---------------------------------------------------------------------------


@pytest.fixture
def frozen_clock(monkeypatch):
    """A settable clock for the rate-limit windows, 15 s into a minute."""
    clock = {"now": 60 * 29_000_000 + 15.0}
    monkeypatch.setattr(ratelimit, "now_seconds", lambda: clock["now"])
    return clock


@pytest.mark.redis
def test_rate_limit_answers_429_with_retry_after_per_token(owner, api_for, settings, frozen_clock):
    settings.API_RATE_LIMIT_PER_MINUTE = 3
    api = api_for(owner)
    assert [api.get(CHATS).status_code for _ in range(3)] == [200, 200, 200]

    before = stored()
    limited = api.post(MESSAGES, message())
    assert_error(limited, 429, "rate_limited")
    # 45 s to the next minute, then a third of it until this minute's 3 weigh 2.
    assert limited["Retry-After"] == "65"
    assert stored() == before

    # The limit is per token: another token of the same person still works.
    assert api_for(owner).get(CHATS).status_code == 200

    frozen_clock["now"] += 60  # the next clock minute, but not yet 60 s of room
    assert api.get(CHATS).status_code == 429
    frozen_clock["now"] += 5
    assert api.post(MESSAGES, message()).status_code == 201


@pytest.mark.redis
def test_rate_limit_zero_disables_it(owner, api_for, settings, frozen_clock):
    settings.API_RATE_LIMIT_PER_MINUTE = 0
    api = api_for(owner)
    assert {api.get(CHATS).status_code for _ in range(5)} == {200}


def test_rate_limit_fails_open_when_redis_is_down(owner, api_for, settings, caplog):
    settings.API_RATE_LIMIT_PER_MINUTE = 1
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # nothing listens on the discard port
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
    api = api_for(owner)
    with caplog.at_level(logging.WARNING, logger="chats.api.ratelimit"):
        assert api.post(MESSAGES, message(message_id="m1")).status_code == 201
        assert api.post(MESSAGES, message(message_id="m2")).status_code == 201
    assert Message.objects.count() == 2
    assert "rate limit not enforced" in caplog.text


# --- GET /chats ---------------------------------------------------------------------------


def test_chat_list_shows_readable_chats_newest_first_with_role(owner, member, team_chat, api_for):
    owner_api = api_for(owner)
    owner_api.post(MESSAGES, message(chat_id="older"))
    message_ingest(channel="web", chat_id="team-room", user_id="olivia", text="newest")

    chats = owner_api.get(CHATS).json()["chats"]
    assert [(c["chat_key"], c["role"]) for c in chats] == [
        ("web:team-room", "owner"),
        ("api:older", "owner"),
    ]
    assert set(chats[0]) == {"chat_key", "channel", "kind", "title", "last_activity_at", "role"}
    assert chats[0]["title"] == "Team room" and chats[0]["kind"] == "room"

    assert [c["chat_key"] for c in owner_api.get(CHATS, {"limit": 1}).json()["chats"]] == [
        "web:team-room"
    ]
    member_chats = api_for(member).get(CHATS).json()["chats"]
    assert [(c["chat_key"], c["role"]) for c in member_chats] == [("web:team-room", "member")]


def test_outsider_chat_list_is_empty(outsider, team_chat, api_for):
    response = api_for(outsider).get(CHATS)
    assert response.status_code == 200
    assert response.json()["chats"] == []


@pytest.mark.parametrize("limit", ["0", "-1", "abc", "1.5", "201"])
def test_chat_list_rejects_bad_limit(owner, api_for, limit):
    error = assert_error(api_for(owner).get(CHATS, {"limit": limit}), 400, "invalid_parameter")
    assert "limit" in error["message"]


# --- GET /chats/<chat_key>/messages ---------------------------------------------------------


def test_outsider_gets_the_same_404_as_for_a_chat_that_does_not_exist(
    owner, outsider, team_chat, api_for
):
    message_ingest(channel="web", chat_id="team-room", user_id="olivia", text="secret plan")
    assert api_for(owner).get(history_url("web:team-room")).status_code == 200

    outsider_api = api_for(outsider)
    hidden = outsider_api.get(history_url("web:team-room"))
    missing = outsider_api.get(history_url("web:no-such-room"))
    assert_error(hidden, 404, "not_found")
    assert hidden.json() == missing.json()
    assert b"secret plan" not in hidden.content


def test_chat_key_with_escaped_characters_is_routed(owner, api_for):
    api = api_for(owner)
    created = api.post(MESSAGES, message(chat_id="a:b", text="colon chat"))
    assert created.json()["chat_key"] == "api:a%3Ab"

    # The key's `%` is itself percent-encoded in the URL.
    response = api.get(history_url("api:a%253Ab"))
    assert response.status_code == 200
    assert response.json()["chat_key"] == "api:a%3Ab"
    assert [m["text"] for m in response.json()["messages"]] == ["colon chat"]
    # The unescaped form is a different (non-canonical) key and finds nothing.
    assert_error(api.get(history_url("api:a:b")), 404, "not_found")


def test_chat_id_with_slash_is_routed(owner, api_for):
    api = api_for(owner)
    api.post(MESSAGES, message(chat_id="team/alpha", text="slashed"))
    response = api.get(history_url("api:team%2Falpha"))
    assert response.status_code == 200
    assert [m["text"] for m in response.json()["messages"]] == ["slashed"]


def _post_history(api, count):
    for n in range(1, count + 1):
        assert api.post(MESSAGES, message(message_id=f"m{n}", text=f"msg {n}")).status_code == 201


def _page(api, **params):
    body = api.get(history_url("api:c1"), params).json()
    return [m["text"] for m in body["messages"]], body["next_before"], body["next_after"]


def test_history_pages_backwards_with_before(owner, api_for):
    api = api_for(owner)
    _post_history(api, 7)

    texts, next_before, next_after = _page(api, limit=3)
    assert texts == ["msg 5", "msg 6", "msg 7"] and next_after is None
    texts, next_before, _ = _page(api, limit=3, before=next_before)
    assert texts == ["msg 2", "msg 3", "msg 4"]
    texts, next_before, _ = _page(api, limit=3, before=next_before)
    assert texts == ["msg 1"] and next_before is None


def test_history_catches_up_forwards_with_after(owner, api_for):
    api = api_for(owner)
    _post_history(api, 7)

    texts, next_before, next_after = _page(api, limit=3, after=0)
    assert texts == ["msg 1", "msg 2", "msg 3"] and next_before is None
    texts, _, next_after = _page(api, limit=3, after=next_after)
    assert texts == ["msg 4", "msg 5", "msg 6"]
    texts, _, last_cursor = _page(api, limit=3, after=next_after)
    assert texts == ["msg 7"] and last_cursor is None

    # Caught up: a new message shows up after the newest id the client holds.
    newest_id = Message.objects.order_by("-id").values_list("id", flat=True).first()
    api.post(MESSAGES, message(message_id="m8", text="msg 8"))
    assert _page(api, after=newest_id)[0] == ["msg 8"]


def test_history_default_page_is_the_newest_fifty(owner, api_for):
    chat_key = None
    for n in range(1, 56):
        chat_key = message_ingest(
            channel="api", chat_id="c1", user_id="u1", message_id=f"m{n}", text=f"msg {n}"
        ).chat.chat_key
    ChatMember.objects.create(chat=Chat.objects.get(chat_key=chat_key), person=owner)
    texts, next_before, _ = _page(api_for(owner))
    assert len(texts) == 50 and texts[0] == "msg 6" and texts[-1] == "msg 55"
    assert next_before is not None


@pytest.mark.parametrize(
    "params",
    [{"before": "abc"}, {"after": "-1"}, {"limit": "0"}, {"limit": "201"}, {"before": "1e3"}],
)
def test_history_rejects_bad_paging_params(owner, api_for, params):
    api = api_for(owner)
    api.post(MESSAGES, message())
    name = next(iter(params))
    error = assert_error(api.get(history_url("api:c1"), params), 400, "invalid_parameter")
    assert name in error["message"]


# --- GET /search --------------------------------------------------------------------------


@pytest.fixture
def searchable(owner, outsider, team_chat, api_for):
    """A team message and an outsider's own chat, both mentioning 'pelican'."""
    message_ingest(
        channel="web",
        chat_id="team-room",
        user_id="olivia",
        user_name="Olivia",
        message_id="t1",
        text="the pelican deployment is due friday",
    )
    api_for(outsider).post(
        MESSAGES, message(chat_id="oscar-notes", user_id="oscar", text="my own pelican notes")
    )


def test_search_finds_messages_in_readable_chats_with_snippet_and_highlights(
    member, searchable, api_for
):
    response = api_for(member).get(SEARCH, {"q": "pelican"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert len(results) == 1
    hit = results[0]
    assert hit["chat_key"] == "web:team-room"
    assert hit["message"]["id"] == Message.objects.get(external_id="t1").pk
    assert hit["message"]["author"] == {"user_id": "olivia", "name": "Olivia"}
    assert hit["message"]["ts"]
    assert "pelican" in hit["snippet"]
    assert hit["highlights"]
    for start, end in hit["highlights"]:
        assert hit["snippet"][start:end].lower() == "pelican"


def test_search_never_shows_an_outsider_other_peoples_messages(outsider, searchable, api_for):
    results = api_for(outsider).get(SEARCH, {"q": "pelican"}).json()["results"]
    assert [r["chat_key"] for r in results] == ["api:oscar-notes"]
    assert all("deployment" not in r["snippet"] for r in results)


def test_search_in_one_chat_and_unreadable_chat_is_404(owner, outsider, searchable, api_for):
    results = api_for(owner).get(SEARCH, {"q": "pelican", "chat": "web:team-room"}).json()
    assert [r["chat_key"] for r in results["results"]] == ["web:team-room"]
    response = api_for(outsider).get(SEARCH, {"q": "pelican", "chat": "web:team-room"})
    assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "params",
    [{}, {"q": ""}, {"q": " \t "}, {"q": "x" * 501}, {"q": "pelican", "limit": "0"}],
)
def test_search_rejects_empty_or_bad_query(owner, api_for, params):
    assert_error(api_for(owner).get(SEARCH, params), 400, "invalid_parameter")
