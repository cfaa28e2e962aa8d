"""Which price applies to a call: the model's price with the latest `valid_from` on or
before the call's UTC day. No price: the cost is unknown (None), never zero."""

from datetime import date

from usage.models import ModelPrice


def price_on(model: str, day: date) -> ModelPrice | None:
    """The price of `model` that applies on `day`, or None when it has none yet."""
    if not model:
        return None
    return (
        ModelPrice.objects.filter(model=model, valid_from__lte=day).order_by("-valid_from").first()
    )


def cost_nanos(model: str, day: date, prompt_tokens: int, completion_tokens: int) -> int | None:
    """The cost of these tokens on `day` in billionths of the currency; None when unpriced."""
    price = price_on(model, day)
    if price is None:
        return None
    return price.cost_nanos(prompt_tokens, completion_tokens)


class PriceBook:
    """All prices of some models in memory, for pricing many records (a rebuild, a reprice)
    with one query."""

    def __init__(self, models: list[str] | None = None):
        prices = ModelPrice.objects.order_by("model", "valid_from")
        if models is not None:
            prices = prices.filter(model__in=models)
        self._by_model: dict[str, list[ModelPrice]] = {}
        for price in prices:
            self._by_model.setdefault(price.model, []).append(price)

    def price_on(self, model: str, day: date) -> ModelPrice | None:
        found = None
        for price in self._by_model.get(model, ()):
            if price.valid_from > day:
                break
            found = price
        return found

    def cost_nanos(self, model, day, prompt_tokens, completion_tokens) -> int | None:
        price = self.price_on(model, day)
        return None if price is None else price.cost_nanos(prompt_tokens, completion_tokens)
