"""Scraping /metrics as Prometheus does, read with the client library's own parser."""

from prometheus_client.parser import text_string_to_metric_families

TOKEN = "scrape-token-for-tests-0123456789"


def scrape(client, token: str = TOKEN, **extra) -> dict[tuple, float]:
    """Every sample of one scrape: (sample name, sorted label pairs) -> value."""
    response = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}, **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    """One sample's value; 0 when the series does not exist (yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
