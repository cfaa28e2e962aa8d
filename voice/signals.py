"""Signals of voice.

`transcript_progress(sender=Transcript, transcript=...)`: a transcription started, read its
audio (duration and parts known) or finished a part (`parts_done`); sent by the worker
that transcribes, outside any transaction. What shows "transcribing…" may listen to it.
"""

from django.dispatch import Signal

transcript_progress = Signal()
