"""Fixtures of the learning tests: the fake model, a record of queued reviews instead of
Redis, and saying things in chats with real turns run in the test process."""

import pytest

from tests.fakes import openai_server as fake_openai


@pytest.fixture
def fake(settings):
    with fake_openai.FakeOpenAI() as server:
        server.configure(settings, LLM_MAX_RETRIES=0)
        yield server


@pytest.fixture
def queued(monkeypatch):
    """The ids of the reviews enqueued (after commit), instead of sending them to Redis."""
    from learning import tasks

    ids: list[int] = []
    monkeypatch.setattr(tasks.run_review, "delay", lambda review_id: ids.append(review_id))
    return ids
