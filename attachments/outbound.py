"""Files the agent hands back: the `file_send` tool, and the reply that carries them.

During a turn the agent calls `file_send` with a file's text, its base64 bytes, or the id
of a file already in this chat. The file is checked (size, files per message, the chat's
daily bytes), its type sniffed from the bytes, its blob written, and it waits as a
`PendingReplyFile` of the turn. When the turn stores its reply, the engine's reply-stored
hook (`chats.agent.registry.register_reply_stored`) makes each pending file an `Attachment`
of that reply message, in the same transaction: the reply and its files are one message,
so history, the API's extras, exports and channels see them together, and a turn whose
reply is never stored (lease lost) sends no file. Channels learn a reply's files through
`chats.reply_files` (registered here), never by importing this app.

Who may: the tool runs only in a chat turn (never in a background review); `attachment_id`
names only files of the turn's own chat (another chat's id is "not found", like a missing
one). Downloads of the reply's files are served to the chat's readers only, as every file.
"""

import base64
import binascii
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from attachments.models import Attachment, Blob, PendingReplyFile, attachment_storage
from attachments.names import clean_file_name
from attachments.services import attachment_from_blob, blob_for, sniff_bytes
from chats.agent.registry import ORIGIN_CHAT, Tool, ToolError, TurnContext
from chats.models import Message, Turn
from chats.reply_files import ReplyFile
from chats.rows import fetch_prepared

logger = logging.getLogger(__name__)

FILE_SEND = "file_send"


def human_size(size: int) -> str:
    """1.2 kB, 3.4 MB: the size as the model and people read it (decimal units)."""
    if size < 1000:
        return f"{size} bytes"
    for unit in ("kB", "MB", "GB"):
        size /= 1000
        if size < 1000 or unit == "GB":
            return f"{size:.1f} {unit}"
    return f"{size} bytes"  # pragma: no cover - the loop always returns


def _too_big(size: int) -> ToolError:
    limit = settings.ATTACHMENTS_MAX_FILE_BYTES
    return ToolError(
        f"The file is {human_size(size)}; a file may have at most {human_size(limit)}. "
        "Send a smaller file (or a summary of it)."
    )


def _decode_base64(value: str) -> bytes:
    """The bytes of `value`, refused by their decoded size before anything is decoded."""
    compact = "".join(value.split())
    decoded_size = len(compact) // 4 * 3 - compact[-2:].count("=")
    if decoded_size > settings.ATTACHMENTS_MAX_FILE_BYTES:
        raise _too_big(decoded_size)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ToolError(f"base64 is not valid base64: {exc}") from exc


def _check_limits(turn: Turn, chat_id: int, size: int) -> None:
    """The limits a stored file meets, counted with the files already pending for this turn
    (they will be on the same reply message) and for the chat's other turns."""
    if size > settings.ATTACHMENTS_MAX_FILE_BYTES:
        raise _too_big(size)
    pending = PendingReplyFile.objects.filter(turn=turn).count()
    if pending >= settings.ATTACHMENTS_MAX_PER_MESSAGE:
        raise ToolError(
            f"A reply may carry at most {settings.ATTACHMENTS_MAX_PER_MESSAGE} files; "
            "this reply already has that many."
        )
    since = timezone.now() - timedelta(days=1)
    stored = (
        Attachment.objects.filter(message__chat_id=chat_id, created_at__gte=since).aggregate(
            total=Sum("size")
        )["total"]
        or 0
    )
    waiting = (
        PendingReplyFile.objects.filter(turn__chat_id=chat_id).aggregate(total=Sum("size"))["total"]
        or 0
    )
    limit = settings.ATTACHMENTS_MAX_BYTES_PER_CHAT_DAY
    if stored + waiting + size > limit:
        raise ToolError(
            f"This chat has {human_size(stored + waiting)} of files from the last 24 hours; "
            f"{human_size(limit)} is the most it may have in a day. The file was not attached."
        )


def _existing(context: TurnContext, attachment_id) -> Attachment:
    """A stored file of this turn's chat (only this chat's: another chat's id is unknown)."""
    try:
        pk = int(attachment_id)
    except (TypeError, ValueError):
        raise ToolError("attachment_id must be a number") from None
    found = (
        Attachment.objects.filter(pk=pk, message__chat_id=context.chat.pk, blob__isnull=False)
        .select_related("blob")
        .first()
    )
    if found is None:
        raise ToolError(f"There is no file #{pk} in this chat.")
    return found


def file_send(context: TurnContext, arguments: dict) -> str:
    """The tool's handler: store the file as pending for this turn's reply."""
    turn = context.turn
    if turn is None or context.origin != ORIGIN_CHAT:
        raise ToolError("Files can only be attached to a reply in a chat.")
    sources = [key for key in ("text", "base64", "attachment_id") if arguments.get(key) is not None]
    if len(sources) != 1:
        raise ToolError("Give exactly one of text, base64 or attachment_id.")
    declared = str(arguments.get("media_type") or "")
    with transaction.atomic():
        if sources[0] == "attachment_id":
            original = _existing(context, arguments["attachment_id"])
            name = clean_file_name(arguments.get("name") or original.name)
            _check_limits(turn, context.chat.pk, original.size)
            blob = Blob.objects.select_for_update().get(pk=original.blob_id)
            media_type, kind, size = original.media_type, original.kind, original.size
        else:
            if sources[0] == "text":
                text = str(arguments["text"])
                if len(text) > settings.ATTACHMENTS_MAX_FILE_BYTES:  # at least that many bytes
                    raise _too_big(len(text))
                data = text.encode("utf-8")
            else:
                data = _decode_base64(str(arguments["base64"]))
            if not data:
                raise ToolError("The file is empty (0 bytes); nothing was attached.")
            name = clean_file_name(arguments.get("name") or "")
            _check_limits(turn, context.chat.pk, len(data))
            sniffed = sniff_bytes(data)
            blob = blob_for(data, sniffed.sha256)
            media_type, kind, size = sniffed.media_type, sniffed.kind, len(data)
        PendingReplyFile.objects.create(
            turn=turn,
            blob=blob,
            name=name,
            kind=kind,
            media_type=media_type,
            declared_type=declared[:127],
            size=size,
        )
    return (
        f"Attached {name} ({human_size(size)}, {media_type}) to your reply; it is sent with "
        "your answer. Do not paste its content again."
    )


FILE_SEND_TOOL = Tool(
    name=FILE_SEND,
    description=(
        "Attach a file to your reply (a CSV, a Markdown report, chart data, …); the person "
        "gets it with your answer. Give its name and one of: text (UTF-8 content), base64 "
        "(bytes), attachment_id (a file of this chat, sent again). One call per file."
    ),
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 255, "description": "e.g. report.csv"},
            "text": {"type": "string"},
            "base64": {"type": "string"},
            "attachment_id": {"type": "integer", "minimum": 1},
            "media_type": {"type": "string", "maxLength": 127},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    handler=file_send,
    timeout_seconds=30,
)


class OutboundTools:
    """The attachments app's tool provider."""

    def tools(self):
        return [FILE_SEND_TOOL]


outbound_tools = OutboundTools()


def _any_pending_sql(quote) -> str:
    pending = PendingReplyFile._meta
    column = quote(pending.get_field("turn").column)
    return f"SELECT 1 FROM {quote(pending.db_table)} WHERE {column} = %s LIMIT 1"


def reply_files_attach(turn: Turn, reply: Message | None) -> None:
    """The reply-stored hook: the turn's pending files become attachments of its reply, in
    the order the agent sent them (dropped when the turn stored no reply). It runs on every
    turn: one prepared statement says "nothing attached" before any queryset is built."""
    if not fetch_prepared("reply_files_pending", _any_pending_sql, [turn.pk]):
        return
    pending = list(PendingReplyFile.objects.filter(turn_id=turn.pk).select_related("blob"))
    if not pending:
        return
    if reply is not None:
        for item in pending:
            attachment_from_blob(
                message=reply,
                blob=item.blob,
                name=item.name,
                kind=item.kind,
                media_type=item.media_type,
                size=item.size,
                declared_type=item.declared_type,
            )
    else:
        logger.info("turn %s stored no reply: its %s attached files dropped", turn.pk, len(pending))
    PendingReplyFile.objects.filter(pk__in=[item.pk for item in pending]).delete()


def _reader(blob_name: str):
    def read() -> bytes:
        with attachment_storage().open(blob_name, "rb") as handle:
            return handle.read()  # its size was bounded when it was stored

    return read


def message_reply_files(message: Message) -> list[ReplyFile]:
    """The reply files provider (`chats.reply_files`): the message's stored files, in order."""
    files = Attachment.objects.filter(message=message, blob__isnull=False).select_related("blob")
    return [
        ReplyFile(
            key=f"attachment:{attachment.pk}",
            name=attachment.name,
            media_type=attachment.media_type,
            kind=attachment.kind,
            size=attachment.size,
            read=_reader(attachment.blob.file.name),
        )
        for attachment in files.order_by("id")
    ]
