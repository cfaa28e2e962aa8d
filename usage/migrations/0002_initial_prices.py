"""The first model price comes from the retired REVIEW_LLM_PRICE_INPUT / _OUTPUT settings:
when either is still in the environment (or .env), the reviews' model (REVIEW_LLM_MODEL,
else LLM_MODEL) gets that price from 2000-01-01 on, so the reviews priced before keep
their cost. Reads the environment, never app code; without those settings, does nothing."""

import datetime
import os
from decimal import Decimal, InvalidOperation

from django.db import migrations


def _price(name: str) -> Decimal | None:
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        return None
    return value if value >= 0 else None


def create_initial_prices(apps, schema_editor):
    price_in = _price("REVIEW_LLM_PRICE_INPUT")
    price_out = _price("REVIEW_LLM_PRICE_OUTPUT")
    if price_in is None and price_out is None:
        return
    model = (os.environ.get("REVIEW_LLM_MODEL") or os.environ.get("LLM_MODEL") or "").strip()
    if not model:
        return
    ModelPrice = apps.get_model("usage", "ModelPrice")
    ModelPrice.objects.get_or_create(
        model=model[:255],
        valid_from=datetime.date(2000, 1, 1),
        defaults={
            "input_per_million": price_in or Decimal(0),
            "output_per_million": price_out or Decimal(0),
            "currency": (os.environ.get("USAGE_CURRENCY") or "USD").strip().upper()[:3],
            "note": "From REVIEW_LLM_PRICE_INPUT / REVIEW_LLM_PRICE_OUTPUT",
        },
    )


class Migration(migrations.Migration):
    dependencies = [("usage", "0001_initial")]

    operations = [migrations.RunPython(create_initial_prices, migrations.RunPython.noop)]
