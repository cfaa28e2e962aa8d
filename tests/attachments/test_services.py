"""attachment_store: sniffed types, one blob per content, limits, and the sweep."""

import io
from datetime import timedelta

import pytest
from django.utils import timezone

from attachments.models import Attachment, Blob, attachment_storage
from attachments.services import AttachmentRefused, attachment_store, blobs_sweep
from chats.models import Message

pytestmark = pytest.mark.django_db


def test_a_png_named_pdf_is_stored_as_an_image(say, png):
    attachment = attachment_store(
        message=say(), name="invoice.pdf", data=png, declared_type="application/pdf"
    )
    assert attachment.media_type == "image/png"
    assert attachment.kind == Attachment.Kind.IMAGE
    assert attachment.declared_type == "application/pdf"  # kept as the claim, not believed
    assert attachment.name == "invoice.pdf"
    assert attachment.state == Attachment.State.READY
    assert attachment.blob.file.open("rb").read() == png


def test_text_claiming_to_be_a_png_is_text(say):
    attachment = attachment_store(
        message=say(), name="photo.png", data=b"not a picture\n", declared_type="image/png"
    )
    assert attachment.media_type == "text/plain"
    assert attachment.kind == Attachment.Kind.DOCUMENT


def test_the_same_bytes_on_two_messages_are_one_blob(say, png):
    first = attachment_store(message=say(), name="a.png", data=png)
    second = attachment_store(message=say(), name="b.png", file=io.BytesIO(png))
    assert first.pk != second.pk
    assert first.blob_id == second.blob_id == first.sha256
    assert Blob.objects.count() == 1
    folder = attachment_storage().path(first.blob.file.name).rsplit("/", 1)[0]
    assert len(attachment_storage().listdir(folder)[1]) == 1


def test_the_message_text_is_never_rewritten(say, png):
    message = say("look at this")
    attachment_store(message=message, name="a.png", data=png)
    message.refresh_from_db()
    assert message.text == "look at this"


def test_a_chinese_file_name_is_kept(say, png):
    attachment = attachment_store(message=say(), name="截图 2026-11-28.png", data=png)
    assert Attachment.objects.get(pk=attachment.pk).name == "截图 2026-11-28.png"


def test_an_empty_file_is_failed_with_a_reason(say):
    attachment = attachment_store(message=say(), name="empty.txt", data=b"")
    assert attachment.state == Attachment.State.FAILED
    assert "empty" in attachment.failure
    assert attachment.blob is None


def test_a_file_over_the_size_limit_is_refused_and_the_message_kept(say, settings):
    settings.ATTACHMENTS_MAX_FILE_BYTES = 10
    message = say()
    with pytest.raises(AttachmentRefused, match="at most 10 bytes"):
        attachment_store(message=message, name="big.txt", file=io.BytesIO(b"x" * 11))
    assert Message.objects.filter(pk=message.pk).exists()
    assert not Attachment.objects.exists() and not Blob.objects.exists()


def test_more_files_than_a_message_may_carry_are_refused(say, settings):
    settings.ATTACHMENTS_MAX_PER_MESSAGE = 2
    message = say()
    attachment_store(message=message, name="1.txt", data=b"one")
    attachment_store(message=message, name="2.txt", data=b"two")
    with pytest.raises(AttachmentRefused, match="at most 2 files") as refused:
        attachment_store(message=message, name="3.txt", data=b"three")
    assert refused.value.status == 400
    assert attachment_store(message=say(), name="3.txt", data=b"three")  # another message may


def test_a_chat_past_its_daily_bytes_refuses_more_until_a_day_has_passed(say, settings):
    settings.ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY = 10
    first = attachment_store(message=say(), name="a.txt", data=b"12345678")
    with pytest.raises(AttachmentRefused, match="last 24 hours"):
        attachment_store(message=say(), name="b.txt", data=b"123")
    Attachment.objects.filter(pk=first.pk).update(
        created_at=timezone.now() - timedelta(days=1, seconds=1)
    )
    assert attachment_store(message=say(), name="b.txt", data=b"123")


def test_the_sweep_deletes_only_blobs_no_attachment_uses(say, png):
    kept = attachment_store(message=say(), name="kept.png", data=png)
    dropped = attachment_store(message=say(), name="dropped.txt", data=b"bye")
    dropped_path = attachment_storage().path(dropped.blob.file.name)
    later = timezone.now() + timedelta(hours=2)
    assert blobs_sweep(now=later) == 0  # both in use

    dropped.message.delete()  # a deleted message (or chat) takes its attachments with it
    assert blobs_sweep(now=timezone.now()) == 0  # unused only just now: kept for the grace
    assert blobs_sweep(now=later) == 1
    assert list(Blob.objects.values_list("sha256", flat=True)) == [kept.sha256]
    assert not attachment_storage().exists(dropped.blob.file.name)
    assert attachment_storage().exists(kept.blob.file.name)
    assert dropped_path


def test_a_blob_shared_with_another_message_survives_one_deletion(say, png):
    first = attachment_store(message=say(), name="a.png", data=png)
    attachment_store(message=say(), name="b.png", data=png)
    first.message.delete()
    assert blobs_sweep(now=timezone.now() + timedelta(hours=2)) == 0
    assert Blob.objects.count() == 1


def test_beat_runs_the_sweep():
    from hermes_site.celery import periodic_tasks

    assert "attachments.tasks.sweep_blobs" in [task for _, task, _ in periodic_tasks()]
