"""Transcripts are searchable: a word spoken in a voice note (real speech by espeak-ng, as
Telegram sends it, transcribed by the hub's engine) finds its message through the hub's
search, the hit names the recording, and only the chat's readers find it."""

import pytest

from attachments.services import attachment_store
from chats.search import message_search
from tests.voice.speech import voice_note
from voice.tasks import transcribe_attachment

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda name, args: None)


def test_a_spoken_word_finds_its_voice_note(say, owner, make_person, tmp_path, enqueued):
    message = say("")  # a voice note has no text of its own
    recording = attachment_store(
        message=message,
        name="voice.ogg",
        data=voice_note(tmp_path).read_bytes(),
        declared_type="audio/ogg",
    )
    say("we should talk about lunch")
    assert transcribe_attachment(recording.pk) == "ready"
    hits = message_search(person=owner, query="sister")
    assert [hit.message.pk for hit in hits] == [message.pk]
    assert hits[0].matched_in.id == recording.pk and hits[0].matched_in.name == "voice.ogg"
    assert "sister" in hits[0].snippet.lower()
    # Someone who does not read the room finds nothing.
    assert message_search(person=make_person("outsider"), query="sister") == []
