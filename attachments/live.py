"""Live pages hear when a file settles: a `message.updated` event on the chat's stream
(docs/EVENTS.md), so every viewer's card of a `pending` file turns `ready` or `failed`
without a reload (the page fetches the message again, as it renders it)."""

from chats.agent import events


def attachment_settled_announce(sender, *, attachment, **kwargs) -> None:
    """Receiver of `attachment_settled` (sent after the commit): publish the file's new state."""
    message = attachment.message
    events.publish(
        message.chat_id,
        "message.updated",
        message={"id": message.pk},
        reason="attachment.settled",
        attachment={"id": attachment.pk, "state": attachment.state},
    )


def attachment_progress_announce(attachment) -> None:
    """A `pending` file's progress changed (a transcript's part done): every viewer's card
    fetches the message again to show it. Called by the app doing the work, outside any
    transaction; at most once per part, so a long recording sends a bounded number."""
    message = attachment.message
    events.publish(
        message.chat_id,
        "message.updated",
        message={"id": message.pk},
        reason="attachment.progress",
        attachment={"id": attachment.pk, "state": attachment.state},
    )
