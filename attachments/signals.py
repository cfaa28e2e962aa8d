"""Signals of attachments.

`attachment_settled(sender=Attachment, attachment=...)`: a file left `pending` for `ready` or
`failed` (sent after the commit of that change, by the worker that processed it). What waits
for a message's files (its turn) listens to it.
"""

from django.dispatch import Signal

attachment_settled = Signal()
