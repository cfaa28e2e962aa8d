import pytest
from django.test import Client

from chats.services import chat_member_ensure, message_ingest

pytestmark = pytest.mark.django_db


def login(person):
    client = Client()
    client.force_login(person)
    return client


def test_chat_list_shows_only_the_persons_chats_newest_first(owner, outsider):
    older = message_ingest(
        channel="api", chat_id="older", user_id="u", text="a", chat_title="Older"
    )
    newer = message_ingest(
        channel="telegram",
        chat_id=-5,
        chat_kind="group",
        user_id="u",
        text="b",
        chat_title="Newer",
    )
    hidden = message_ingest(
        channel="api", chat_id="secret", user_id="u", text="c", chat_title="Secret"
    )
    for result in (older, newer):
        chat_member_ensure(chat=result.chat, person=owner)
    chat_member_ensure(chat=hidden.chat, person=outsider)
    page = login(owner).get("/").content.decode()
    assert page.index("Newer") < page.index("Older")
    assert "Secret" not in page
    assert "badge-telegram" in page


def test_anonymous_visitors_are_sent_to_the_login_page():
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize(
    "provider, expected",
    [("none", "No language model is configured"), ("local", "small offline demo model")],
)
def test_the_chat_list_says_which_model_answers(settings, owner, provider, expected):
    settings.LLM_PROVIDER = provider
    page = login(owner).get("/").content.decode()
    assert expected in page
