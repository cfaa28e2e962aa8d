"""Audio seconds as a usage unit of their own: every transcription is in the ledger (kind
"transcription", `audio_ms`), attributed to the recording's author in its chat, free on the
local engine and priced per minute on a paid server; money caps are checked before a paid
transcription (a cap it would pass sends it to the local engine), tokens caps never; the
usage page shows the seconds, and only to who may read that spend."""

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from attachments.services import attachment_store
from budgets.models import Budget, Scope
from tests.fakes.stt_server import FakeSTT
from tests.voice.speech import CHINESE, voice_note
from usage.models import Kind, UsageDay, UsageRecord
from usage.services import attribution_of_trigger
from voice.tasks import transcribe_attachment

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _held_queue(monkeypatch):
    monkeypatch.setattr("attachments.services.current_app.send_task", lambda name, args: None)


def transcribed(say, tmp_path):
    attachment = attachment_store(
        message=say(""), name="v.ogg", data=voice_note(tmp_path).read_bytes()
    )
    assert transcribe_attachment(attachment.pk) == "ready"
    attachment.refresh_from_db()
    return attachment


def test_a_local_transcription_counts_its_seconds_for_free(say, tmp_path, owner, team_chat):
    attachment = transcribed(say, tmp_path)
    record = UsageRecord.objects.get(kind=Kind.TRANSCRIPTION)
    seconds = attachment.transcript.duration_seconds
    assert abs(record.audio_ms - seconds * 1000) < 2
    # Attributed like any work done for the message (usage's rule: its author's person).
    who = attribution_of_trigger(attachment.message_id)
    assert (record.person_id, record.chat_id) == (who.person_id, team_chat.pk)
    assert (record.cost_nanos, record.model) == (0, "local:whisper-base")
    assert record.prompt_tokens == record.completion_tokens == 0  # seconds are not tokens
    day = UsageDay.objects.get(kind=Kind.TRANSCRIPTION)
    assert day.audio_ms == record.audio_ms


def test_the_usage_page_shows_the_seconds_to_who_may_read_them(
    say, tmp_path, owner, member, team_chat, make_person
):
    attachment = transcribed(say, tmp_path)
    seconds = str(round(attachment.transcript.duration_seconds))
    client = Client()
    client.force_login(owner)
    page = client.get(reverse("usage"), {"by": "kind"})
    assert page.context["total"].audio_seconds == int(seconds)
    assert f'<dd id="total-audio">{seconds} seconds</dd>' in page.content.decode()
    # A member who is not the author, and an outsider, see none of the owner's seconds.
    for person in (member, make_person("oscar")):
        client.force_login(person)
        other = client.get(reverse("usage"), {"by": "kind"})
        assert other.context["total"].audio_seconds == 0


def test_a_paid_server_is_priced_per_minute(say, tmp_path, settings):
    with FakeSTT(text=CHINESE, language="zh") as server:
        server.configure(settings, STT_PRICE_PER_MINUTE="0.006")
        attachment = transcribed(say, tmp_path)
    assert len(server.requests) == 1
    record = UsageRecord.objects.get(kind=Kind.TRANSCRIPTION)
    assert record.model == "api:fake-whisper"
    minutes = Decimal(str(attachment.transcript.duration_seconds)) / 60
    assert abs(record.cost_nanos - int(Decimal("0.006") * minutes * 1_000_000_000)) <= 1


def test_a_money_cap_sends_a_paid_transcription_to_the_local_engine(
    say, tmp_path, settings, team_chat
):
    Budget.objects.create(scope=Scope.CHAT, chat=team_chat, monthly_cost=Decimal("0.000001"))
    with FakeSTT(text=CHINESE, language="zh") as server:
        server.configure(settings, STT_PRICE_PER_MINUTE="0.006")
        attachment = transcribed(say, tmp_path)
    assert server.requests == []  # never asked: the cap refused the cost
    assert attachment.transcript.engine == "local:whisper-base"
    assert UsageRecord.objects.get(kind=Kind.TRANSCRIPTION).cost_nanos == 0


def test_a_tokens_cap_does_not_stop_a_paid_transcription(say, tmp_path, settings, team_chat):
    Budget.objects.create(scope=Scope.CHAT, chat=team_chat, monthly_tokens=1)
    from usage.services import usage_record

    usage_record(kind=Kind.TURN, chat_id=team_chat.pk, person_id=None, prompt_tokens=50)
    with FakeSTT(text=CHINESE, language="zh") as server:
        server.configure(settings, STT_PRICE_PER_MINUTE="0.006")
        attachment = transcribed(say, tmp_path)
    assert len(server.requests) == 1
    assert attachment.transcript.engine == "api:fake-whisper"
