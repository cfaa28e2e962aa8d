"""Fixtures of the fault-injection suite: a Valkey server each test owns (so it can kill
and restart it under the running processes) and an API token of a person."""

import pytest

from chats.services import api_token_create
from hermes_site.embedded_valkey import ValkeyServer


@pytest.fixture
def owned_valkey(tmp_path):
    """A Valkey on a free port that persists as `make run`'s does (append-only file)."""
    server = ValkeyServer(tmp_path / "valkey", persist=True)
    server.start()
    try:
        yield server
    finally:
        server.stop(crash=True)


@pytest.fixture
def api_token(make_person):
    person = make_person("faulty")
    _, raw = api_token_create(person=person, name="faults")
    return raw
