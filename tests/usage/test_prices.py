"""Prices: the price of a call is the one valid on its UTC day; a price change applies from
its date only; no price means an unknown cost, never zero; the first price comes from the
retired REVIEW_LLM_PRICE_* settings."""

import importlib
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError

from tests.usage.helpers import day_sums, nanos, price
from usage.models import Kind, ModelPrice, UsageDay, UsageRecord
from usage.prices import PriceBook, price_on
from usage.services import usage_prices_changed, usage_rebuild, usage_record

pytestmark = pytest.mark.django_db


def at(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(hour=12, tzinfo=UTC)


def work(day: str, tokens_in=1_000, tokens_out=100, model="m", **extra):
    return usage_record(
        kind=Kind.TURN,
        chat_id=None,
        person_id=None,
        model=model,
        prompt_tokens=tokens_in,
        completion_tokens=tokens_out,
        at=at(day),
        **extra,
    )


def test_the_price_valid_on_the_calls_day_applies():
    price("m", 1, 2, valid_from=date(2026, 1, 1))
    price("m", 3, 4, valid_from=date(2026, 2, 1))
    assert price_on("m", date(2025, 12, 31)) is None
    assert price_on("m", date(2026, 1, 31)).input_per_million == 1
    assert price_on("m", date(2026, 2, 1)).input_per_million == 3
    book = PriceBook()
    assert book.price_on("m", date(2026, 1, 15)).input_per_million == 1
    assert book.price_on("m", date(2025, 1, 15)) is None
    assert work("2025-12-31").cost_nanos is None
    assert work("2026-01-31").cost_nanos == nanos(1_000, 100, 1, 2)
    assert work("2026-02-01").cost_nanos == nanos(1_000, 100, 3, 4)


def test_a_price_change_applies_from_its_date_only():
    price("m", 1, 1, valid_from=date(2026, 1, 1))
    before = work("2026-01-10")
    after = work("2026-01-20")
    assert before.cost_nanos == after.cost_nanos == nanos(1_000, 100, 1, 1)
    # Staff add a new price from the 15th: the 20th is repriced, the 10th is not.
    price("m", 5, 10, valid_from=date(2026, 1, 15))
    usage_prices_changed(model="m")
    before.refresh_from_db()
    after.refresh_from_db()
    assert before.cost_nanos == nanos(1_000, 100, 1, 1)
    assert after.cost_nanos == nanos(1_000, 100, 5, 10)
    assert UsageDay.objects.get(day=date(2026, 1, 10)).cost_nanos == before.cost_nanos
    assert UsageDay.objects.get(day=date(2026, 1, 20)).cost_nanos == after.cost_nanos


def test_a_price_added_later_prices_the_unknown_cost_of_its_days():
    unknown = work("2026-03-03", tokens_in=7, tokens_out=3)
    assert unknown.cost_nanos is None
    assert UsageDay.objects.get().unpriced_tokens == 10
    price("m", "0.15", "0.60", valid_from=date(2026, 3, 1))
    usage_prices_changed(model="m")
    unknown.refresh_from_db()
    assert unknown.cost_nanos == nanos(7, 3, "0.15", "0.60")
    row = UsageDay.objects.get()
    assert row.unpriced_tokens == 0 and row.unpriced_calls == 0
    assert row.cost_nanos == unknown.cost_nanos
    # Removing it makes the cost unknown again, never zero.
    ModelPrice.objects.all().delete()
    usage_prices_changed(model="m")
    row = UsageDay.objects.get()
    assert row.cost_nanos == 0 and row.unpriced_tokens == 10 and row.unpriced_calls == 1


def test_costs_are_exact_over_many_small_calls():
    price("m", "0.1", "0.2", valid_from=date(2026, 1, 1))
    for _ in range(30):
        work("2026-01-02", tokens_in=1, tokens_out=1)
    assert UsageDay.objects.get().cost_nanos == 30 * nanos(1, 1, "0.1", "0.2")
    assert Decimal(UsageDay.objects.get().cost_nanos) / 10**9 == Decimal("0.000009")


def test_other_models_prices_do_not_apply():
    price("other", 1, 1, valid_from=date(2000, 1, 1))
    assert work("2026-01-01", model="m").cost_nanos is None


def test_prices_are_in_the_hubs_currency_and_never_negative(settings):
    settings.USAGE_CURRENCY = "EUR"
    wrong = ModelPrice(model="m", input_per_million=1, output_per_million=1, currency="USD")
    with pytest.raises(ValidationError):
        wrong.full_clean()
    negative = ModelPrice(model="m", input_per_million=-1, output_per_million=1, currency="EUR")
    with pytest.raises(ValidationError):
        negative.full_clean()
    ModelPrice(model="m", input_per_million=1, output_per_million=1, currency="EUR").full_clean()


def test_rebuild_recomputes_the_sums_from_the_ledger_exactly():
    price("m", 2, 3, valid_from=date(2026, 1, 1))
    for day in ("2026-01-01", "2026-01-01", "2026-01-02"):
        work(day)
    usage_record(kind=Kind.TOOL, chat_id=None, person_id=None, duration_ms=40, at=at("2026-01-02"))
    exact = {
        (r.slot, r.calls, r.prompt_tokens, r.cost_nanos, r.duration_ms)
        for r in UsageDay.objects.all()
    }
    UsageDay.objects.update(calls=999, prompt_tokens=0, cost_nanos=1)  # drifted somehow
    UsageDay.objects.filter(day=date(2026, 1, 2)).delete()
    assert usage_rebuild() == 3
    rebuilt = {
        (r.slot, r.calls, r.prompt_tokens, r.cost_nanos, r.duration_ms)
        for r in UsageDay.objects.all()
    }
    assert rebuilt == exact
    assert day_sums()["prompt"] == sum(UsageRecord.objects.values_list("prompt_tokens", flat=True))


def test_the_rebuild_command(capsys):
    from django.core.management import call_command

    work("2026-01-05")
    UsageDay.objects.all().delete()
    call_command("usage_rebuild")
    assert UsageDay.objects.get().prompt_tokens == 1_000
    assert "1 daily usage rows rebuilt" in capsys.readouterr().out


def _initial_prices_migration():
    return importlib.import_module("usage.migrations.0002_initial_prices")


def test_the_first_price_comes_from_the_retired_review_settings(monkeypatch):
    monkeypatch.setenv("REVIEW_LLM_MODEL", "small-reviewer")
    monkeypatch.setenv("REVIEW_LLM_PRICE_INPUT", "0.15")
    monkeypatch.setenv("REVIEW_LLM_PRICE_OUTPUT", "0.60")
    _initial_prices_migration().create_initial_prices(apps, None)
    made = ModelPrice.objects.get()
    assert made.model == "small-reviewer" and made.valid_from == date(2000, 1, 1)
    assert (made.input_per_million, made.output_per_million) == (Decimal("0.15"), Decimal("0.6"))


def test_without_the_retired_settings_no_price_is_made(monkeypatch):
    monkeypatch.delenv("REVIEW_LLM_PRICE_INPUT", raising=False)
    monkeypatch.delenv("REVIEW_LLM_PRICE_OUTPUT", raising=False)
    monkeypatch.setenv("REVIEW_LLM_MODEL", "small-reviewer")
    _initial_prices_migration().create_initial_prices(apps, None)
    assert not ModelPrice.objects.exists()


def test_the_review_price_settings_are_gone(settings):
    assert not hasattr(settings, "REVIEW_LLM_PRICE_INPUT")
    assert not hasattr(settings, "REVIEW_LLM_PRICE_OUTPUT")


def test_a_price_saved_in_the_admin_reprices_from_its_day(make_person):
    from django.test import Client

    boss = make_person("boss", is_staff=True, is_superuser=True)
    early, late = work("2026-01-10"), work("2026-01-20")
    client = Client()
    client.force_login(boss)
    response = client.post(
        "/admin/usage/modelprice/add/",
        {
            "model": "m",
            "valid_from": "2026-01-15",
            "input_per_million": "2",
            "output_per_million": "4",
            "currency": "USD",
            "note": "",
        },
    )
    assert response.status_code == 302, response.content[:500]
    early.refresh_from_db()
    late.refresh_from_db()
    assert early.cost_nanos is None and late.cost_nanos == nanos(1_000, 100, 2, 4)
    assert UsageDay.objects.get(day=date(2026, 1, 20)).cost_nanos == late.cost_nanos
    assert UsageDay.objects.get(day=date(2026, 1, 10)).unpriced_tokens == 1_100


def test_people_who_are_not_staff_cannot_set_prices(member):
    from django.test import Client

    client = Client()
    client.force_login(member)
    response = client.post(
        "/admin/usage/modelprice/add/",
        {"model": "m", "valid_from": "2026-01-15", "input_per_million": "0",
         "output_per_million": "0", "currency": "USD"},
    )  # fmt: skip
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert not ModelPrice.objects.exists()
