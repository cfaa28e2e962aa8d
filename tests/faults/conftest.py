"""Fixtures of the fault-injection suite: a Valkey server each test owns (so it can kill
and restart it under the running processes), an API token of a person, and `make run`'s
supervised stack against them (`stack`).

Fault injection against `make run` itself (issue #11): the supervisor with daphne and a
Celery worker (beat inside), a Valkey the test kills and restarts, the fake model streaming
slow replies. Each scenario checks what a user would notice: every message they posted is
kept, no turn runs twice, every chat answers again within 60 s of the recovery, and no
process stays dead; the figures go to var/test-logs/fault-figures.jsonl and into
docs/RELIABILITY.md. One scenario per file, so the parallel run spreads them over workers.
"""

import pytest
from django.conf import global_settings

from chats.services import api_token_create
from hermes_site.embedded_valkey import ValkeyServer
from tests.faults.stack import PASSWORD, model_reply, start_supervised_stack


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


@pytest.fixture
def person(transactional_db, settings, django_user_model):
    # The subprocesses use the real password hashers: the person must log in there.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    return django_user_model.objects.create_user(username="faulty", password=PASSWORD)


@pytest.fixture
def stack(request, person, fake_llm, owned_valkey, tmp_path):
    fake_llm.default = model_reply
    _, token = api_token_create(person=person, name="faults")
    env = getattr(request, "param", {})
    stack = start_supervised_stack(
        tmp_path=tmp_path, fake_llm=fake_llm, valkey=owned_valkey, token=token, **env
    )
    try:
        yield stack
    finally:
        leftovers = stack.run.stop()
    assert leftovers == [], f"processes left running after Ctrl-C: {leftovers}"
