"""The sliding one-minute windows behind the API's and the composer's rate limits: a limit
holds across a minute's turn, the wait it reports is the true one, and refused requests are
not counted."""

import random

import pytest

from chats import ratelimit
from chats.ratelimit import seconds_until_allowed, window_retry_after

pytestmark = pytest.mark.redis

MINUTE = 60 * 29_000_000.0  # the start of some clock minute


@pytest.fixture
def clock(monkeypatch):
    clock = {"now": MINUTE}
    monkeypatch.setattr(ratelimit, "now_seconds", lambda: clock["now"])
    return clock


def hit(limit: int, key: str = "k") -> int | None:
    return window_retry_after(scope="test", key=key, limit=limit)


def test_a_limit_of_one_holds_across_the_turn_of_a_minute(clock):
    clock["now"] = MINUTE + 59.5
    assert hit(1) is None
    clock["now"] = MINUTE + 60.5  # the next clock minute, one second later
    assert hit(1) == 60  # last minute's post weighs until this minute ends (59.5 s)
    assert hit(1, key="other") is None  # per key


def test_the_reported_wait_is_exact_whatever_came_before(clock):
    rng = random.Random(7)
    for round_ in range(40):
        key, limit = f"k{round_}", rng.randint(1, 8)
        clock["now"] = MINUTE + 600 * round_ + rng.uniform(0, 60)
        for _ in range(1000):  # bounded: a limiter that never refuses fails, not hangs
            clock["now"] += rng.uniform(0, 12)
            refused = hit(limit, key)
            if refused is not None:
                break
        assert refused is not None
        at = clock["now"]
        if refused > 1:
            clock["now"] = at + refused - 1
            assert hit(limit, key) is not None, (round_, limit, refused)
        clock["now"] = at + refused
        assert hit(limit, key) is None, (round_, limit, refused)


def test_refused_requests_do_not_push_the_wait_further(clock):
    clock["now"] = MINUTE + 15
    assert [hit(3) for _ in range(3)] == [None, None, None]
    waits = [hit(3) for _ in range(50)]  # a client hammering at 429
    assert set(waits) == {65}  # 45 s to the next minute, then a third of it for the share
    clock["now"] += 65
    assert hit(3) is None


def test_the_wait_within_a_minute_as_last_minutes_share_fades():
    # 4 last minute, 0 this minute, limit 2, 15 s in: 4 * (1 - t/60) + 1 <= 2 from t = 45.
    assert seconds_until_allowed(previous=4, current=0, limit=2, elapsed=15) == 30
    # This minute already full: only the next minute helps.
    assert seconds_until_allowed(previous=0, current=2, limit=2, elapsed=15) == 75
    assert seconds_until_allowed(previous=0, current=1, limit=1, elapsed=59.5) == 61


def test_a_counter_expires_after_the_minute_that_reads_it(clock):
    from django.core.cache import cache

    clock["now"] = MINUTE + 30
    assert hit(5, key="ttl") is None
    name = cache.make_and_validate_key(f"test-rate:ttl:{int(clock['now'] // 60)}")
    ttl = cache._cache.get_client(name).ttl(name)
    assert ratelimit.WINDOW_SECONDS * 2 - 30 < ttl <= ratelimit.COUNTER_TIMEOUT
