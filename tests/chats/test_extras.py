"""The message extras registry: apps hang data on messages without chats knowing them."""

import pytest

from chats import extras
from chats.api.render import messages_json
from chats.services import message_ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(extras, "_extras", dict(extras._extras))
    return extras.register_message_extras


def _messages(count):
    return [
        message_ingest(
            channel="api", chat_id="c", user_id="u", message_id=f"m{i}", text=f"hello {i}"
        ).message
        for i in range(count)
    ]


def test_each_message_gets_its_value_or_the_default(registered):
    messages = _messages(2)
    calls = []

    def provider(page):
        calls.append([m.pk for m in page])
        return {page[0].pk: ["first"]}

    registered("labels", provider, default=list)
    rendered = messages_json(messages)
    assert [m["labels"] for m in rendered] == [["first"], []]
    assert calls == [[m.pk for m in messages]]  # asked once for the whole page


def test_a_failing_provider_leaves_its_default_and_the_history_intact(registered):
    def broken(page):
        raise RuntimeError("boom")

    registered("broken", broken, default=list)
    rendered = messages_json(_messages(1))
    assert rendered[0]["broken"] == [] and rendered[0]["text"] == "hello 0"
