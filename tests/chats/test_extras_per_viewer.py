"""The per-viewer parts of the extras registry: message HTML that depends on who views the
page, message bodies rendered for their viewer (and the plain Markdown when a renderer
fails), and the outbound text filters of channels without dashboard links."""

import pytest

from chats import extras
from chats.services import message_ingest

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _own_registries(monkeypatch):
    monkeypatch.setattr(extras, "_html", dict(extras._html))
    monkeypatch.setattr(extras, "_bodies", {})
    monkeypatch.setattr(extras, "_outbound", {})


def _message(text="hello **there**"):
    return message_ingest(channel="api", chat_id="c", user_id="u", text=text).message


def test_a_per_person_renderer_is_told_who_views(make_person):
    viewer = make_person("vera")
    message = _message()
    seen = []

    def renderer(messages, person):
        seen.append(person)
        return {message.pk: f"<i>for {person.get_username()}</i>"}

    extras.register_message_html("viewer", renderer, per_person=True)
    extras.with_extras_html([message], viewer)
    assert seen == [viewer] and "for vera" in message.extras_html


def test_a_body_renderer_replaces_the_text_for_its_viewer_and_a_failure_falls_back(
    make_person,
):
    viewer = make_person("vera")
    message, other = _message(), _message("plain")
    extras.register_message_body("broken", lambda messages, person: 1 / 0)
    extras.register_message_body(
        "app", lambda messages, person: {message.pk: f"<p>seen by {person.get_username()}</p>"}
    )
    extras.with_extras_html([message, other], viewer)
    assert message.body_html == "<p>seen by vera</p>"
    assert other.body_html == ""  # the template shows its Markdown


def test_outbound_filters_apply_in_order_and_a_failure_sends_the_text_as_stored():
    message = _message("see [X1]")
    extras.register_outbound_text("one", lambda m, text: text.replace("[X1]", "(doc § one)"))
    extras.register_outbound_text("broken", lambda m, text: 1 / 0)
    assert extras.outbound_text(message, message.text) == "see (doc § one)"
    assert extras.outbound_text(None, "as is") == "as is"
