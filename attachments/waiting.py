"""The turn waits for its files: a message whose files are not all `ready` or `failed` yet
gets its turn once they are, or after ATTACHMENTS_TURN_WAIT_SECONDS with what is ready.

The waiting itself is `chats.agent.holds` (a hold with the reason "files"); this module
places it and clears it: when the last pending file of the message settles
(`attachment_settled`), when a channel finished fetching the message's files (Telegram),
or, for a hold whose files settled before it was committed, right after its commit. Once
cleared, chats requests the turn through the usual path (busy and interrupt rules), once.
"""

from django.conf import settings
from django.db import transaction

from attachments.models import Attachment
from attachments.processing import processor_for
from chats.agent.holds import turn_hold_clear, turn_hold_place
from chats.agent.turns import turn_request
from chats.models import Message, Turn, TurnHold

FILES = "files"


def files_hold(*, message: Message, respond: bool, extra_seconds: float = 0.0) -> None:
    """Hold `message`'s turn until its files settle (in the caller's transaction); at most
    ATTACHMENTS_TURN_WAIT_SECONDS (+ `extra_seconds`: a channel's time to fetch them, + the
    longest `wait_seconds` of the processors of its pending files: a transcription)."""
    turn_hold_place(
        message=message,
        reason=FILES,
        deadline_seconds=settings.ATTACHMENTS_TURN_WAIT_SECONDS
        + extra_seconds
        + _processing_wait(message.pk),
        respond=respond,
    )


def _processing_wait(message_id: int) -> float:
    pending = Attachment.objects.filter(message_id=message_id, state=Attachment.State.PENDING)
    waits = [getattr(processor_for(a), "wait_seconds", 0.0) for a in pending]
    return max(waits, default=0.0)


def files_hold_lengthen(message: Message) -> None:
    """A file whose processor takes longer (`wait_seconds`) was stored on a message whose
    turn already waits for its files (Telegram places the hold before fetching): the hold
    waits that much longer (placing again only moves times later)."""
    hold = (
        TurnHold.objects.filter(message_id=message.pk, state=TurnHold.State.HELD)
        .values("reasons", "respond")
        .first()
    )
    if hold is not None and FILES in (hold["reasons"] or []):
        files_hold(message=message, respond=hold["respond"])


def files_settled(message_id: int) -> bool:
    return not Attachment.objects.filter(
        message_id=message_id, state=Attachment.State.PENDING
    ).exists()


def files_hold_release_if_settled(message_id: int) -> Turn | None:
    """Clear the files' hold of the message when none of its files is pending any more (a
    no-op without a hold); returns the turn that requested, if any."""
    if not files_settled(message_id):
        return None
    return turn_hold_clear(message_id=message_id, reason=FILES)


def turn_request_when_ready(*, message: Message) -> Turn | None:
    """Request `message`'s turn now if its files are all settled; else hold it until they are
    (or the bound) and return None. The caller's files are stored already."""
    if files_settled(message.pk):
        return turn_request(message=message)
    files_hold(message=message, respond=True)
    # A file that settled between the check and the commit found no hold to clear.
    transaction.on_commit(lambda: files_hold_release_if_settled(message.pk))
    return None


def on_attachment_settled(sender=None, attachment=None, **kwargs) -> None:
    """Receiver of `attachment_settled`: the message's turn goes once its last file settled."""
    if attachment is not None:
        files_hold_release_if_settled(attachment.message_id)
