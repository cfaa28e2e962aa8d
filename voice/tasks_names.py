"""Names other modules send or route without importing the tasks module."""

TRANSCRIBE_TASK = "voice.tasks.transcribe_attachment"
