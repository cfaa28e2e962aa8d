"""Storing the files a person sent with one message: the part every upload door shares (the
HTTP API's multipart upload, the dashboard's composer).

Each file is stored in its own transaction, after its message, by `attachment_store`; a
file over a limit is refused with its reason and the others (and the message) are kept.
The caller requests the message's turn once, after this returns, so the agent's turn
starts with the files in place.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.core.files.uploadedfile import UploadedFile

from attachments.models import Attachment
from attachments.services import AttachmentRefused, attachment_store
from chats.models import Message


@dataclass(frozen=True)
class FileRefusal:
    """One file that was not stored: `reason` is for the person, `status` for HTTP."""

    name: str
    reason: str
    status: int


@dataclass
class FilesStored:
    stored: list[Attachment] = field(default_factory=list)
    refused: list[FileRefusal] = field(default_factory=list)

    def refusal_text(self) -> str:
        """Every refusal in one sentence a person can read, or "" when none."""
        if not self.refused:
            return ""
        reasons = "; ".join(f"{item.name}: {item.reason}" for item in self.refused)
        return f"{reasons} The message was stored without these files."

    def refusal_status(self) -> int | None:
        return max((item.status for item in self.refused), default=None)


def message_files_store(*, message: Message, files: Iterable[UploadedFile]) -> FilesStored:
    """Store each uploaded file on `message` (one transaction per file, in order); files
    over a limit are refused with the reason, never failing the message or the others."""
    outcome = FilesStored()
    for upload in files:
        try:
            outcome.stored.append(
                attachment_store(
                    message=message,
                    name=upload.name or "",
                    file=upload,
                    declared_type=upload.content_type or "",
                )
            )
        except AttachmentRefused as exc:
            outcome.refused.append(FileRefusal(upload.name or "", str(exc), exc.status))
    return outcome
