"""The dashboard composer's post rate limit: per person, counted in Redis like the API's,
failing open when Redis is down."""

import logging
import uuid

import pytest

from chats import ratelimit
from chats.models import Message
from tests.chats.dashboard_helpers import login, page_url

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

HTMX = {"HX-Request": "true"}


@pytest.fixture
def frozen_clock(monkeypatch):
    """A settable clock for the rate-limit windows, 15 s into a minute."""
    clock = {"now": 60 * 29_000_000 + 15.0}
    monkeypatch.setattr(ratelimit, "now_seconds", lambda: clock["now"])
    return clock


def post(client, chat, text):
    return client.post(
        f"{page_url(chat)}messages", {"text": text, "client_id": str(uuid.uuid4())}, headers=HTMX
    )


def test_posting_faster_than_the_limit_is_refused_with_a_message_in_the_composer(
    member, owner, team_chat, settings, frozen_clock
):
    settings.WEB_POST_RATE_LIMIT_PER_MINUTE = 3
    client = login(member)
    assert [post(client, team_chat, f"m{i}").status_code for i in range(3)] == [201, 201, 201]

    limited = post(client, team_chat, "one too many")
    assert limited.status_code == 429
    assert limited["Retry-After"] == "65"  # the sliding minute: see test_ratelimit
    assert limited["HX-Retarget"] == "#composer-error"
    page = limited.content.decode()
    assert 'id="composer-error"' in page and "too fast" in page and "65 s" in page
    assert not Message.objects.filter(text="one too many").exists()

    # Per person: somebody else in the room still posts; the next minute the member does too.
    assert post(login(owner), team_chat, "mine").status_code == 201
    frozen_clock["now"] += 65
    assert post(client, team_chat, "later").status_code == 201


def test_a_plain_form_post_over_the_limit_gets_the_page_with_the_message(
    member, team_chat, settings, frozen_clock
):
    settings.WEB_POST_RATE_LIMIT_PER_MINUTE = 1
    client = login(member)
    assert post(client, team_chat, "first").status_code == 201
    response = client.post(f"{page_url(team_chat)}messages", {"text": "second"})
    assert response.status_code == 429 and "too fast" in response.content.decode()
    assert Message.objects.filter(chat=team_chat).count() == 1


def test_the_post_limit_fails_open_when_redis_is_down(member, team_chat, settings, caplog):
    settings.WEB_POST_RATE_LIMIT_PER_MINUTE = 1
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:9/0",  # nothing listens on the discard port
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
    client = login(member)
    with caplog.at_level(logging.WARNING, logger="chats.api.ratelimit"):
        assert post(client, team_chat, "a").status_code == 201
        assert post(client, team_chat, "b").status_code == 201
    assert Message.objects.filter(chat=team_chat).count() == 2
    assert "rate limit not enforced" in caplog.text
