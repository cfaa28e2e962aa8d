from django.apps import AppConfig


class VoiceConfig(AppConfig):
    name = "voice"
    verbose_name = "Voice (transcripts of audio and video)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from attachments.processing import processor_register
        from attachments.to_model import text_frame_register
        from voice.framing import FRAMES
        from voice.processor import PROCESSOR_NAME, transcribe, wants_recording
        from voice.tasks_names import TRANSCRIBE_TASK

        # Audio and videos' sound tracks, transcribed on the voice queue (voice.tasks); the
        # model is loaded only in the transcription child, never in this process.
        # A turn waits VOICE_TURN_WAIT_SECONDS longer for a recording than for other files.
        processor_register(
            PROCESSOR_NAME,
            wants=wants_recording,
            run=transcribe,
            task=TRANSCRIBE_TASK,
            wait_seconds=settings.VOICE_TURN_WAIT_SECONDS,
        )
        for kind, frame in FRAMES.items():
            text_frame_register(kind, frame)
        # History exports keep the transcript's facts beside the file's words and bytes.
        from chats.history_bundle import register_record_extra
        from voice.history import transcripts_export, transcripts_parse, transcripts_restore

        register_record_extra(
            "transcripts",
            export=transcripts_export,
            parse=transcripts_parse,
            restore=transcripts_restore,
        )
        # The channels show a transcript's language, duration and progress through
        # attachments' details registry; its progress moves every open page of the chat.
        from attachments.details import register_attachment_details
        from voice.details import transcript_details, transcript_progress_announce
        from voice.signals import transcript_progress

        register_attachment_details("transcript", transcript_details)
        transcript_progress.connect(
            transcript_progress_announce, dispatch_uid="voice-progress-live"
        )
