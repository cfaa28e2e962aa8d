"""Per-process caches of knowledge start empty in every test: a count or an index left by
another test's passages would decide this one's search."""

import pytest

from knowledge import term_stats


@pytest.fixture(autouse=True)
def _fresh_term_stats():
    term_stats.forget()
    yield
    term_stats.forget()
