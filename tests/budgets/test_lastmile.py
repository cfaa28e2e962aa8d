"""The last-mile claim of a cap (budgets.lastmile): taken by one turn at a time, renewed by
its holder, given up when the turn's spend is stored, and never blocking when Redis is down."""

from datetime import date
from types import SimpleNamespace

import pytest
from django.db import transaction

from budgets import lastmile
from budgets.lastmile import claim, claim_key, holder, in_last_mile, release
from budgets.receivers import release_when_finished, release_when_stored
from chats.models import Turn
from hermes_site.redis import get_redis

MONTH = date(2026, 11, 1)


def test_the_last_mile_is_the_last_ten_percent_by_default(settings):
    assert settings.BUDGET_LAST_MILE_PERCENT == 10
    assert not in_last_mile(1_000, 899)
    assert in_last_mile(1_000, 900)
    assert in_last_mile(1_000, 1_500)
    settings.BUDGET_LAST_MILE_PERCENT = 0
    assert not in_last_mile(1_000, 999)


def test_one_turn_holds_a_claim_and_renews_it_another_is_refused():
    key = claim_key(7, None, MONTH)
    assert claim(key, 101)
    assert claim(key, 101)  # its holder renews it
    assert not claim(key, 102)
    assert holder(key) == 101


def test_the_default_budget_is_claimed_per_person_and_per_month():
    assert claim(claim_key(7, 1, MONTH), 101)
    assert claim(claim_key(7, 2, MONTH), 102)  # another person under the same default
    assert claim(claim_key(7, 1, date(2026, 12, 1)), 103)  # next month


def test_releasing_frees_every_claim_the_turn_holds_and_only_those():
    person, chat = claim_key(7, 1, MONTH), claim_key(8, None, MONTH)
    other = claim_key(9, None, MONTH)
    assert claim(person, 101) and claim(chat, 101) and claim(other, 102)
    release(101)
    assert holder(person) is None and holder(chat) is None
    assert holder(other) == 102
    assert claim(person, 103)
    release(101)  # twice: nothing left, nothing taken from the new holder
    assert holder(person) == 103


def test_an_expired_claim_taken_by_another_turn_is_not_released_by_the_first():
    key = claim_key(7, None, MONTH)
    assert claim(key, 101)
    assert 0 < get_redis().ttl(key) <= lastmile.CLAIM_SECONDS
    get_redis().delete(key)  # as if it expired
    assert claim(key, 102)
    release(101)
    assert holder(key) == 102


def test_with_redis_down_a_claim_never_blocks(settings, monkeypatch):
    import hermes_site.redis as hub_redis

    monkeypatch.setattr(hub_redis, "_breaker", hub_redis._Breaker())
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    key = claim_key(7, None, MONTH)
    assert claim(key, 101) and claim(key, 102)
    release(101)  # no error either


@pytest.mark.django_db(transaction=True)
def test_a_turn_gives_up_its_claims_after_its_spend_commits_not_before():
    """A turn's counters are stored when it ends or waits for a decision (`model_usage`,
    inside that transaction): the claim goes once that commits, so the next check sees it.
    (That the receivers are connected: test_budgets' last-mile tests.)"""
    key = claim_key(7, None, MONTH)
    assert claim(key, 101)
    with transaction.atomic():
        release_when_stored(Turn, kind="turn", turn=SimpleNamespace(pk=101))
        assert holder(key) == 101
    assert holder(key) is None
    assert claim(key, 102)
    release_when_stored(Turn, kind="compression", turn=SimpleNamespace(pk=102))
    assert holder(key) == 102  # a compression summary is not the turn's stored spend
    release_when_finished(Turn, turn=SimpleNamespace(pk=102), status="failed")
    assert holder(key) is None
