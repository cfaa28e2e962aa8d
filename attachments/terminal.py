"""The terminal's `/attach PATH`: stage a file for the next message (several may be staged);
`/attach` alone lists what is staged, `/attach --clear` unstages. The files are read and
stored with `attachment_store` once the next message is stored, before its turn is requested
(chats.staged). The terminal runs as its operator's OS user, so it reads what that user
may read; a missing, unreadable or too large file is refused when it is staged, with why.

A file a processor derives something from (a document's text, an audio file's transcript)
is processed right there, in the terminal's process and within the processor's own bounds,
before the turn: the terminal runs its turns in-process too, and must not depend on a
worker to hear a voice note. A worker that also picks the file up settles nothing twice
(`attachment_process` settles only a `pending` file), so the terminal's turn never holds
for its files: they are read, transcribed or failed before it starts.
"""

import os
import shlex
from pathlib import Path

from django.conf import settings

from attachments.models import Attachment
from attachments.services import AttachmentRefused, attachment_process, attachment_store
from chats.models import Message
from chats.slash_commands import CommandContext, SlashCommand

STAGED = "attachments.staged"  # the session key: a list of absolute paths
HELP = "Attach a file to your next message (/attach PATH; /attach lists, --clear unstages)"
ONLY_HERE = (
    "/attach PATH is for the terminal; here, send the file itself (or upload it on the dashboard)."
)


def _size(size: int) -> str:
    for unit in ("bytes", "KB", "MB"):
        if size < 1024 or unit == "MB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} MB"


def _listing(staged: list[str]) -> str:
    if not staged:
        return "Nothing is staged. /attach PATH stages a file for your next message."
    lines = [f"Staged for your next message ({len(staged)}):"]
    for path in staged:
        try:
            size = _size(os.path.getsize(path))
        except OSError:
            size = "gone"
        lines.append(f"• {Path(path).name} ({size})")
    return "\n".join(lines)


def _path_of(args: str) -> str:
    """The path as typed: quotes allowed (a name with spaces may also be typed bare)."""
    try:
        words = shlex.split(args)
    except ValueError:
        words = [args]
    return os.path.expanduser(words[0] if len(words) == 1 else args)


def _refusal(path: Path) -> str | None:
    """Why `path` cannot be staged, or None."""
    if not path.exists():
        return f"Not staged: {path} does not exist."
    if not path.is_file():
        return f"Not staged: {path} is not a file."
    if not os.access(path, os.R_OK):
        return f"Not staged: {path} cannot be read (permission denied)."
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        return f"Not staged: {path} cannot be read ({exc.strerror or exc})."
    limit = settings.ATTACHMENTS_MAX_FILE_BYTES
    if size > limit:
        return f"Not staged: {path.name} is {_size(size)}; a file may have at most {_size(limit)}."
    return None


def attach_answer(context: CommandContext) -> str:
    """Stage, list or clear the session's files for the next message."""
    if context.session is None:
        return ONLY_HERE
    staged: list[str] = context.session.setdefault(STAGED, [])
    args = context.args.strip()
    if not args:
        return _listing(staged)
    if args == "--clear":
        count = len(staged)
        staged.clear()
        return f"Unstaged {count} file(s)." if count else "Nothing was staged."
    path = Path(_path_of(args)).absolute()
    refusal = _refusal(path)
    if refusal:
        return refusal
    most = settings.ATTACHMENTS_MAX_PER_MESSAGE
    if len(staged) >= most:
        return f"Not staged: a message may carry at most {most} files; {most} are staged."
    staged.append(str(path))
    return f"Staged {path.name} ({_size(path.stat().st_size)}); it goes with your next message."


def staged_files_store(message: Message, session: dict) -> list[str]:
    """Store the session's staged files on `message` and unstage them; a line for each."""
    staged = session.pop(STAGED, None) or []
    lines = []
    for path in staged:
        name = Path(path).name
        try:
            with open(path, "rb") as handle:
                attachment = attachment_store(message=message, name=name, file=handle)
        except AttachmentRefused as exc:
            lines.append(f"Not attached: {name}: {exc}")
            continue
        except OSError as exc:
            lines.append(f"Not attached: {name} cannot be read now ({exc.strerror or exc}).")
            continue
        lines.append(
            f"Attached {attachment.name} ({_size(attachment.size)}, {attachment.media_type})."
        )
        if attachment.state == Attachment.State.PENDING:
            lines.append(_processed(attachment))
    return lines


def _processed(attachment: Attachment) -> str:
    """Process a pending file now (its text, its transcript); a line saying how it went."""
    attachment_process(attachment.pk)
    attachment.refresh_from_db()
    heard = attachment.kind in (Attachment.Kind.AUDIO, Attachment.Kind.VIDEO)
    if attachment.state == Attachment.State.FAILED:
        what = "Not transcribed" if heard else "Not read"
        return f"{what}: {attachment.name}: {attachment.failure} (the file is kept)"
    if attachment.state == Attachment.State.PENDING:  # another process is on it
        return f"{attachment.name} is still being processed; the agent is told so."
    if heard:
        words = " ".join(attachment.extracted_text.split())
        shown = words if len(words) <= 200 else words[:199] + "…"
        return f"Transcribed automatically: {shown}" if words else "No speech was heard."
    return f"Read {attachment.name}."


attach_command = SlashCommand(name="attach", help=HELP, handler=attach_answer, channels=("cli",))
