"""Voice messages on the dashboard and the HTTP API (the channels' side of docs/VOICE.md): a
recording uploaded by the composer becomes an audio attachment, its card has a player and,
under it, "transcribing…" then the transcript marked "transcribed automatically", live to
every viewer; the history API shows the transcript with `machine_made: true`, language and
duration; the audio plays for readers only. The transcript comes from a processor the test
registers (the engine's boundary, `attachments.processing`), and its language and duration
from a details provider (`attachments.details`), as the voice app registers them."""

import uuid
from urllib.parse import quote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from attachments.details import register_attachment_details, unregister_attachment_details
from attachments.models import Attachment
from attachments.processing import Derived, ProcessingFailed
from attachments.services import attachment_process, attachment_store
from chats.models import ChatMember, Message
from chats.services import chat_get_or_create, chat_member_ensure, message_ingest
from tests.attachments.audio import speech_ogg_opus, speech_webm_opus

pytestmark = pytest.mark.django_db(transaction=True)

SPOKEN = "the deployment is done"


@pytest.fixture
def engine(monkeypatch):
    """The only processor of audio: files stay `pending` until the test runs it."""
    from attachments import processing

    state = {"text": SPOKEN, "failure": ""}

    def run(attachment):
        if state["failure"]:
            raise ProcessingFailed(state["failure"])
        return Derived(extracted_text=state["text"])

    processors = {n: p for n, p in processing._processors.items() if n == "documents"}
    processors["test-transcriber"] = processing.Processor(
        "test-transcriber", lambda a: a.kind in ("audio", "video"), run
    )
    monkeypatch.setattr(processing, "_processors", processors)
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda *a, **k: None)
    return state


@pytest.fixture
def transcript_details():
    """Language and duration as the voice app knows them (by attachment)."""

    def provider(attachments):
        return {
            a.pk: {"language": "en", "duration_seconds": 2.4, "engine": "test"}
            for a in attachments
            if a.kind in ("audio", "video")
        }

    register_attachment_details("transcript", provider)
    yield
    unregister_attachment_details("transcript")


def login(person) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    return client


def record_and_send(client, chat, data, name="voice-message-20261128-061500.webm"):
    """What the record button sends: the recording as the only file of a new message."""
    client.get("/")
    return client.post(
        f"/attachments/chats/{quote(chat.chat_key, safe='/:')}/messages",
        data={
            "text": "",
            "client_id": str(uuid.uuid4()),
            "files": [SimpleUploadedFile(name, data, content_type="audio/webm")],
        },
        headers={"X-CSRFToken": client.cookies["csrftoken"].value},
    )


def message_html(client, chat, message_id) -> str:
    return client.get(f"/chats/{chat.chat_key}/messages/{message_id}").content.decode()


def test_a_recording_is_a_voice_message_whose_card_shows_the_transcript_when_made(
    team_chat, owner, member, engine, transcript_details
):
    recording = speech_webm_opus(SPOKEN)
    response = record_and_send(login(member), team_chat, recording)
    assert response.status_code == 201, response.content
    attachment = Attachment.objects.get()
    assert attachment.kind == "audio" and attachment.media_type == "audio/webm"
    assert attachment.state == Attachment.State.PENDING
    html = response.json()["html"]
    assert f'src="/attachments/{attachment.pk}/listen"' in html and "<audio" in html
    assert "transcribing…" in html and "processing…" not in html

    attachment_process(attachment.pk)  # the worker makes the transcript
    html = message_html(login(owner), team_chat, attachment.message_id)
    assert SPOKEN in html and "transcribed automatically · en · 2 s" in html
    assert "transcribing…" not in html


def test_a_failed_transcript_shows_why_and_keeps_the_audio(team_chat, member, engine):
    engine["failure"] = "The audio has no speech in it."
    record_and_send(login(member), team_chat, speech_webm_opus("hmm"))
    attachment = Attachment.objects.get()
    attachment_process(attachment.pk)
    html = message_html(login(member), team_chat, attachment.message_id)
    assert "not transcribed" in html and "The audio has no speech in it." in html
    assert "The audio is kept." in html and f"/attachments/{attachment.pk}/listen" in html


def test_the_player_gets_the_audio_inline_readers_only(team_chat, member, outsider, engine):
    data = speech_ogg_opus(SPOKEN)
    record_and_send(login(member), team_chat, data, name="note.ogg")
    attachment = Attachment.objects.get()
    response = login(member).get(f"/attachments/{attachment.pk}/listen")
    assert response.status_code == 200 and b"".join(response.streaming_content) == data
    assert response["Content-Type"] == "audio/ogg"
    assert response["Content-Disposition"].startswith("inline; ")
    assert "sandbox" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, no-store"
    # An outsider, and a member of another chat: the 404 of a missing file.
    assert login(outsider).get(f"/attachments/{attachment.pk}/listen").status_code == 404
    other_room, _ = chat_get_or_create(channel="web", chat_id="other-room")
    chat_member_ensure(chat=other_room, person=outsider, role=ChatMember.Role.OWNER)
    assert login(outsider).get(f"/attachments/{attachment.pk}/listen").status_code == 404
    # The player seeks: one byte range, 206 (an end past the file is cut at its end).
    part = login(member).get(f"/attachments/{attachment.pk}/listen", HTTP_RANGE="bytes=10-19")
    assert part.status_code == 206 and part.content == data[10:20]
    assert part["Content-Range"] == f"bytes 10-19/{len(data)}"
    assert "sandbox" in part["Content-Security-Policy"]
    tail = login(member).get(f"/attachments/{attachment.pk}/listen", HTTP_RANGE="bytes=-5")
    assert tail.status_code == 206 and tail.content == data[-5:]
    whole = login(member).get(
        f"/attachments/{attachment.pk}/listen", HTTP_RANGE=f"bytes={len(data)}-"
    )
    assert whole.status_code == 200  # unsatisfiable: the whole file, as a server may
    assert (
        login(outsider)
        .get(f"/attachments/{attachment.pk}/listen", HTTP_RANGE="bytes=0-9")
        .status_code
        == 404
    )
    # Not audio: never played inline here.
    text = attachment_store(message=attachment.message, name="a.txt", data=b"words\n")
    assert login(member).get(f"/attachments/{text.pk}/listen").status_code == 404


def _history(api_for, person, chat):
    return api_for(person).get(f"/api/v1/chats/{quote(chat.chat_key, safe='')}/messages")


def test_the_history_api_shows_the_transcript_as_machine_made(
    api_for, team_chat, owner, say, engine, transcript_details
):
    voice = attachment_store(message=say(""), name="voice.ogg", data=speech_ogg_opus(SPOKEN))
    body = _history(api_for, owner, team_chat).json()
    assert body["messages"][0]["attachments"][0]["transcript"] == {
        "state": "pending",
        "text": None,
        "machine_made": True,
        "language": "en",
        "duration_seconds": 2.4,
        "engine": "test",
    }
    attachment_process(voice.pk)
    shown = _history(api_for, owner, team_chat).json()["messages"][0]["attachments"][0]
    assert shown["transcript"]["text"] == SPOKEN
    assert shown["transcript"]["machine_made"] is True and shown["kind"] == "audio"


def test_without_a_details_provider_the_transcript_still_says_machine_made(
    api_for, team_chat, owner, say, engine
):
    voice = attachment_store(message=say(""), name="voice.ogg", data=speech_ogg_opus(SPOKEN))
    attachment_process(voice.pk)
    transcript = _history(api_for, owner, team_chat).json()["messages"][0]["attachments"][0][
        "transcript"
    ]
    assert transcript == {
        "state": "ready",
        "text": SPOKEN,
        "machine_made": True,
        "language": None,
        "duration_seconds": None,
    }


def test_a_provider_cannot_make_a_transcript_look_typed(api_for, team_chat, owner, say, engine):
    register_attachment_details(
        "transcript", lambda items: {a.pk: {"machine_made": False} for a in items}
    )
    try:
        attachment_store(message=say(""), name="v.ogg", data=speech_ogg_opus(SPOKEN))
        shown = _history(api_for, owner, team_chat).json()["messages"][0]["attachments"][0]
    finally:
        unregister_attachment_details("transcript")
    assert shown["transcript"]["machine_made"] is True


def test_transcripts_are_refused_to_an_outsider_another_integration_and_another_groups_member(
    api_for, team_chat, say, outsider, make_person, engine
):
    voice = attachment_store(message=say(""), name="voice.ogg", data=speech_ogg_opus(SPOKEN))
    attachment_process(voice.pk)
    # An outsider's token.
    assert _history(api_for, outsider, team_chat).status_code == 404
    assert api_for(outsider).get(f"/api/v1/attachments/{voice.pk}").status_code == 404
    # Another integration: a person whose token talks in its own API conversation.
    integration = make_person("ivan")
    own, _ = chat_get_or_create(channel="api", chat_id=f"ivan-{integration.pk}")
    chat_member_ensure(chat=own, person=integration, role=ChatMember.Role.OWNER)
    assert _history(api_for, integration, team_chat).status_code == 404
    assert api_for(integration).get(f"/api/v1/attachments/{voice.pk}").status_code == 404
    # A member of another Telegram group, whose own group's voice note stays theirs.
    gina = make_person("gina")
    group, _ = chat_get_or_create(channel="telegram", chat_id="-100777", kind="group")
    chat_member_ensure(chat=group, person=gina)
    theirs = message_ingest(
        channel="telegram",
        chat_id="-100777",
        user_id="55",
        user_name="Gina",
        message_id="9",
        text="[voice message, 2 s]",
    ).message
    heard = attachment_store(message=theirs, name="voice.ogg", data=speech_ogg_opus("ours"))
    assert _history(api_for, gina, team_chat).status_code == 404
    assert api_for(gina).get(f"/api/v1/attachments/{voice.pk}").status_code == 404
    assert api_for(gina).get(f"/api/v1/attachments/{heard.pk}").status_code == 200
    assert Message.objects.filter(chat=team_chat).count() == 1


def test_the_voice_apps_details_show_language_duration_and_progress(
    api_for, team_chat, owner, say, engine
):
    """voice.details on real Transcript rows (registered here as VoiceConfig.ready does)."""
    from chats.agent.events import events_since
    from voice.details import transcript_details, transcript_progress_announce
    from voice.models import Transcript

    register_attachment_details("transcript", transcript_details)
    try:
        voice = attachment_store(message=say(""), name="v.ogg", data=speech_ogg_opus(SPOKEN))
        row = Transcript.objects.create(
            attachment=voice,
            language="zh",
            duration_seconds=61.5,
            engine="local:whisper-base",
            parts_done=1,
            parts_total=3,
        )
        transcript_progress_announce(transcript=row)
        shown = _history(api_for, owner, team_chat).json()["messages"][0]["attachments"][0]
        html = message_html(login(owner), team_chat, voice.message_id)
    finally:
        unregister_attachment_details("transcript")
    assert shown["transcript"] == {
        "state": "pending",
        "text": None,
        "machine_made": True,
        "language": "zh",
        "duration_seconds": 61.5,
        "engine": "local:whisper-base",
        "parts_done": 1,
        "parts_total": 3,
    }
    assert "transcribing…" in html and "part 1 of 3" in html
    progress = [
        e for e in events_since(team_chat.pk, 0) if e.get("reason") == "attachment.progress"
    ]
    assert [(e["message"]["id"], e["attachment"]) for e in progress] == [
        (voice.message_id, {"id": voice.pk, "state": "pending"})
    ]
