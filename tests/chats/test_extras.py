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
    rendered = messages_json(messages, person=None)
    assert [m["labels"] for m in rendered] == [["first"], []]
    assert calls == [[m.pk for m in messages]]  # asked once for the whole page


def test_a_failing_provider_leaves_its_default_and_the_history_intact(registered):
    def broken(page):
        raise RuntimeError("boom")

    registered("broken", broken, default=list)
    rendered = messages_json(_messages(1), person=None)
    assert rendered[0]["broken"] == [] and rendered[0]["text"] == "hello 0"


# --- The dashboard's HTML of the same -------------------------------------------------------


@pytest.fixture
def html_registered(monkeypatch):
    monkeypatch.setattr(extras, "_html", {})
    monkeypatch.setattr(extras, "_composer", {})


def _room_with(person):
    from chats.models import ChatMember
    from chats.services import chat_get_or_create, chat_member_ensure

    chat, _ = chat_get_or_create(channel="web", chat_id="html-room", title="HTML room")
    chat_member_ensure(chat=chat, person=person, role=ChatMember.Role.OWNER)
    return chat


def test_the_page_shows_each_renderers_html_under_its_message(html_registered, make_person, client):
    from tests.chats.dashboard_helpers import page_url, say

    alice = make_person("alice")
    chat = _room_with(alice)
    first, second = say(chat, "one"), say(chat, "two")
    calls = []

    def renderer(page):
        calls.append(len(page))
        return {first.pk: '<p class="from-an-app">app part</p>'}

    def broken(page):
        raise RuntimeError("boom")

    extras.register_message_html("app", renderer)
    extras.register_message_html("broken", broken)
    extras.register_composer_html("app", lambda chat, person: '<button id="app-tool">T</button>')
    extras.register_composer_html("broken", lambda chat, person: 1 / 0)
    client.force_login(alice)
    page = client.get(page_url(chat)).content.decode()
    assert page.count('class="from-an-app"') == 1
    assert page.index("from-an-app") < page.index(f'id="message-{second.pk}"')
    assert calls == [2]  # once for the whole page
    assert 'id="app-tool"' in page and "two" in page  # a broken renderer hides nothing
    single = client.get(f"/chats/{chat.chat_key}/messages/{first.pk}").content.decode()
    assert 'class="from-an-app"' in single
