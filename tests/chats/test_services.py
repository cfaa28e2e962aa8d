import pytest

from chats.models import Message
from chats.services import message_ingest

pytestmark = [pytest.mark.django_db, pytest.mark.storage]


def test_redelivered_message_is_stored_once():
    first = message_ingest(channel="api", chat_id="c1", user_id="u1", message_id="m1", text="hi")
    again = message_ingest(channel="api", chat_id="c1", user_id="u1", message_id="m1", text="hi")
    assert first.created and again.duplicate
    assert again.message.pk == first.message.pk
    assert Message.objects.count() == 1
    assert first.message.token_count > 0
