"""Notifications other apps may listen to; they announce what already happened."""

from django.dispatch import Signal

# Sent by `bots.services.telegram_update_process` after an update was applied (or found
# already applied): `kind` (message, edited_message, callback_query, ...) and `duplicate`.
# For counting only (polling and webhook alike): receivers must be cheap.
update_processed = Signal()
