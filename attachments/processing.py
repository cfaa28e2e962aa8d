"""What the hub derives from a stored file, through a registry: extraction of documents'
text, descriptions of images, transcripts of audio. Each capability registers a processor
for the files it knows in its `AppConfig.ready()`; `attachment_store` marks a file `pending`
when some processor wants it and enqueues `attachments.tasks.process_attachment` after the
commit. The task runs the processor (off the request path, on the files' queue), stores what
it derived and sets `ready` or `failed` (with a reason a person can read), then sends
`attachment_settled`. A file no processor wants is `ready` as soon as it is stored.

A processor is `(name, wants, run)`, and optionally `task`:
- `wants(attachment) -> bool`: cheap, no I/O (it runs inside the storing transaction);
- `run(attachment) -> Derived`: may take time and memory within its own bounds; raises
  `ProcessingFailed("reason for a person")` for a file it cannot read. Any other exception
  is logged and the file marked failed with a generic reason: no worker dies of one file;
- `task`: the name of a Celery task of the processor's own app, enqueued instead of
  PROCESS_TASK for the files it wants, with the attachment's id: work that must not share
  the files' queue (transcription, on its own queue and time limit) runs there, and the
  task settles the file through `attachments.services.attachment_process` like any other;
- `wait_seconds`: how much longer than ATTACHMENTS_TURN_WAIT_SECONDS a turn waits for the
  files it processes (a transcription takes longer than reading a PDF).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attachments.models import Attachment

logger = logging.getLogger(__name__)

# The Celery task that processes one file (attachments.tasks), sent by name so that storing
# a file needs no import of the tasks module.
PROCESS_TASK = "attachments.tasks.process_attachment"


class ProcessingFailed(Exception):
    """A file a processor cannot read: `str(exc)` is the reason shown to people."""


@dataclass
class Derived:
    """What a processor derived: any field left None is not changed."""

    extracted_text: str | None = None
    page_count: int | None = None
    description: str | None = None
    # A note a person and the model may read beside the text ("pages 3–7 are scanned images").
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Processor:
    name: str
    wants: Callable[["Attachment"], bool]
    run: Callable[["Attachment"], Derived]
    task: str = PROCESS_TASK
    wait_seconds: float = 0.0


_processors: dict[str, Processor] = {}


def processor_register(
    name: str,
    *,
    wants: Callable[["Attachment"], bool],
    run: Callable[["Attachment"], Derived],
    task: str | None = None,
    wait_seconds: float = 0.0,
) -> None:
    """Register (or replace, by name) a processor of stored files; `task` (a Celery task's
    name) runs it elsewhere than on the files' queue; `wait_seconds` lengthens a turn's
    wait for its files."""
    _processors[name] = Processor(name, wants, run, task or PROCESS_TASK, wait_seconds)


def processor_unregister(name: str) -> None:
    _processors.pop(name, None)


def processor_for(attachment: "Attachment") -> Processor | None:
    """The first registered processor that wants this file, or None."""
    for processor in _processors.values():
        try:
            if processor.wants(attachment):
                return processor
        except Exception:  # noqa: BLE001 - a broken predicate must not block storing
            logger.exception("processor %r failed to answer wants()", processor.name)
    return None
