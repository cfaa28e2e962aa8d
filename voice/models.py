"""What the hub knows of a recording's transcript beside its text.

The transcript's words are `Attachment.extracted_text` (so search, export and the context
see them like any derived text); its state and failure reason are the attachment's. A
`Transcript` row is created when transcription starts, so its progress (parts done of
parts) can be shown while it runs, and keeps the rest: the language heard, the duration,
the engine that made it. A transcript is always machine-made.
"""

from django.db import models
from django.utils import timezone

from attachments.models import Attachment


class Transcript(models.Model):
    attachment = models.OneToOneField(
        Attachment, on_delete=models.CASCADE, related_name="transcript", primary_key=True
    )
    # A Whisper language code ("en", "zh"), "" until known.
    language = models.CharField(max_length=16, blank=True, default="")
    duration_seconds = models.FloatField(null=True, blank=True)
    # "local:whisper-base", or "api:<STT_MODEL>" for a remote server.
    engine = models.CharField(max_length=64, blank=True, default="")
    machine_made = models.BooleanField(default=True, editable=False)
    parts_done = models.PositiveIntegerField(default=0)
    parts_total = models.PositiveIntegerField(default=0)  # 0 until the audio is decoded
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"transcript of attachment {self.attachment_id} ({self.language or '?'})"
