"""What the channels show beside a transcript's words (language, duration, engine, progress),
registered with attachments' details registry (`attachments.details`, name "transcript"):
the HTTP API's attachment JSON and the dashboard's audio card read it without attachments
naming this app. One query per page; only files the caller's page already holds (so only
files its reader may read). `transcript_progress_announce` moves the cards' progress live.

Both are connected in `VoiceConfig.ready()`:

    register_attachment_details("transcript", transcript_details)
    transcript_progress.connect(transcript_progress_announce, dispatch_uid="voice-progress-live")
"""

from collections.abc import Sequence

from attachments.models import Attachment
from voice.models import Transcript

HEARD_KINDS = (Attachment.Kind.AUDIO, Attachment.Kind.VIDEO)


def transcript_details(attachments: Sequence[Attachment]) -> dict[int, dict]:
    """`{attachment pk: {language, duration_seconds, engine, parts_done, parts_total}}` of the
    heard files that have a transcript row (made when transcription starts)."""
    heard = [a.pk for a in attachments if a.kind in HEARD_KINDS]
    if not heard:
        return {}
    return {
        row.attachment_id: {
            "language": row.language or None,
            "duration_seconds": row.duration_seconds,
            "engine": row.engine or None,
            "parts_done": row.parts_done,
            "parts_total": row.parts_total,
        }
        for row in Transcript.objects.filter(attachment_id__in=heard)
    }


def transcript_progress_announce(sender=None, transcript: Transcript | None = None, **kwargs):
    """Receiver of `voice.signals.transcript_progress`: the open pages of the chat fetch the
    voice message again, so "transcribing… part 2 of 5" moves live."""
    if transcript is None:
        return
    from attachments.live import attachment_progress_announce

    attachment = Attachment.objects.select_related("message").filter(pk=transcript.pk).first()
    if attachment is not None and attachment.state == Attachment.State.PENDING:
        attachment_progress_announce(attachment)
