"""A chat's file into a knowledge collection, by one of its maintainers: the "Add to a
collection" control under a file on the dashboard (shown only to maintainers who read the
chat), and the `knowledge_add` tool ("add this to the Runbooks collection"), which succeeds
only when the person asking maintains that collection.

The file's text is the attachments' extraction (already bounded by their limits); indexing
it (splitting, embedding) runs on the files' queue, never in the request or the turn. The
document is `chat-files/<file name>` in the collection, replaced when the same name is added
again; audited as document_added/changed with the chat it came from.
"""

from collections.abc import Sequence

from celery import shared_task
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse

from attachments.models import Attachment
from chats.agent.registry import ORIGIN_CHAT, Tool, ToolError, TurnContext
from chats.models import Message
from chats.selectors import chats_readable_by
from knowledge.access import may_maintain
from knowledge.jobs import knowledge_job
from knowledge.models import Collection, Document, KnowledgeEvent
from knowledge.services import audit

INDEX_TASK = "knowledge.chat_files.index_attachment"
FOLDER = "chat-files"
Kind = KnowledgeEvent.Kind


def maintained_by(person) -> list[Collection]:
    """The collections `person` maintains (superusers: every one), by name."""
    if not getattr(person, "is_authenticated", False) or not person.is_active:
        return []
    queryset = Collection.objects.all()
    if not person.is_superuser:
        queryset = queryset.filter(maintainers=person)
    return list(queryset.order_by("name"))


def attachment_add(*, attachment: Attachment, collection: Collection, by) -> Document:
    """Add `attachment` (a file of a chat `by` reads) to `collection` (which `by` maintains);
    its indexing is queued. PermissionDenied says why not."""
    if not may_maintain(by, collection):
        raise PermissionDenied(f"Only a maintainer of {collection.name} adds documents to it.")
    chat = attachment.message.chat
    if not chats_readable_by(by).filter(pk=chat.pk).exists():
        raise PermissionDenied("That file is in a chat you do not read.")
    if attachment.blob_id is None:
        raise PermissionDenied("That file is not stored (it failed or was removed).")
    path = f"{FOLDER}/{attachment.name}"[:1000]
    with transaction.atomic():
        document, created = Document.objects.get_or_create(
            collection=collection,
            path=path,
            defaults={"source": Document.Source.ATTACHMENT, "attachment_id": attachment.pk},
        )
        if document.source != Document.Source.ATTACHMENT:
            raise PermissionDenied(
                f"{collection.name} already has {path} from elsewhere; rename the file."
            )
        Document.objects.filter(pk=document.pk).update(
            attachment_id=attachment.pk, state=Document.State.PENDING, reason=""
        )
        audit(
            collection,
            Kind.DOCUMENT_ADDED if created else Kind.DOCUMENT_CHANGED,
            by=by,
            document=document,
            chat=chat,
            attachment=attachment.pk,
        )
        transaction.on_commit(lambda: _enqueue(document.pk, attachment.pk, by.pk))
    document.refresh_from_db()
    return document


def _enqueue(document_id: int, attachment_id: int, by_id: int) -> None:
    from attachments.tasks import files_queue

    index_attachment.apply_async((document_id, attachment_id, by_id), queue=files_queue())


@shared_task(bind=True, name=INDEX_TASK, ignore_result=True, max_retries=None)
def index_attachment(self, document_id: int, attachment_id: int, by_id: int | None = None) -> str:
    """Index the attachment's extracted text as the document (files' queue)."""
    from knowledge.tasks import embed_missing

    with knowledge_job(self):
        outcome = _index_attachment(document_id, attachment_id, by_id)
    if outcome == "ready":
        embed_missing.delay()  # its vectors, a batch per task (the job is free again)
    return outcome


def _index_attachment(document_id: int, attachment_id: int, by_id: int | None) -> str:
    from django.contrib.auth import get_user_model

    from knowledge.indexing import document_mark_failed, document_store_text

    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return "gone"
    by = get_user_model().objects.filter(pk=by_id).first() if by_id else None
    attachment = Attachment.objects.filter(pk=attachment_id).select_related("blob").first()
    if attachment is None or attachment.blob_id is None:
        document_mark_failed(document=document, reason="The file is no longer stored.",
                             content_hash="", size=0, by=by)  # fmt: skip
        return "failed"
    text = (attachment.extracted_text or "").strip()
    if attachment.state != Attachment.State.READY or not text:
        reason = attachment.failure or "The file has no text the hub could read."
        if attachment.state == Attachment.State.PENDING:
            reason = "The file was still being read; add it again in a moment."
        document_mark_failed(document=document, reason=reason, content_hash=attachment.blob_id,
                             size=attachment.size, by=by)  # fmt: skip
        return "failed"
    pages = attachment.page_count or 1
    document_store_text(
        document=document, text=attachment.extracted_text, paged=pages > 1 and "\f" in text,
        media_type=attachment.media_type, page_count=pages, content_hash=attachment.blob_id,
        size=attachment.size, by=by, embed_now=False,
    )  # fmt: skip
    return "ready"


# --- the control under a chat's files ------------------------------------------------------


def files_html(messages: Sequence[Message], person) -> dict[int, str]:
    """For a maintainer of any collection: under each message with stored files, a form to
    add one of them to a collection (chats.extras, per person)."""
    collections = maintained_by(person)
    if not collections:
        return {}
    files: dict[int, list[Attachment]] = {}
    for attachment in Attachment.objects.filter(
        message__in=[m.pk for m in messages], blob__isnull=False
    ).order_by("pk"):
        files.setdefault(attachment.message_id, []).append(attachment)
    return {
        pk: render_to_string(
            "knowledge/add_file.html",
            {"files": found, "collections": collections, "action": reverse("knowledge_add_file")},
        )
        for pk, found in files.items()
    }


# --- the agent's tool ----------------------------------------------------------------------

ADD_DESCRIPTION = (
    "Add a file of this chat to a team knowledge collection, when the person asking says so "
    '("add this to the Runbooks collection"). Only works when that person maintains the '
    "collection. `file` is the file's number (#id) or name; without it, the newest file of "
    "this chat."
)

ADD_PARAMETERS = {
    "type": "object",
    "properties": {
        "collection": {"type": "string", "minLength": 1, "maxLength": 100},
        "file": {"type": "string", "maxLength": 255},
    },
    "required": ["collection"],
    "additionalProperties": False,
}


def _file_in_chat(context: TurnContext, wanted: str) -> Attachment:
    files = Attachment.objects.filter(message__chat_id=context.chat.pk, blob__isnull=False)
    wanted = (wanted or "").strip().lstrip("#")
    if wanted.isdigit():
        found = files.filter(pk=int(wanted)).first()
    elif wanted:
        found = files.filter(name=wanted).order_by("-pk").first()
    else:
        found = files.order_by("-pk").first()
    if found is None:
        raise ToolError(f"There is no file {wanted or 'at all'} in this chat.")
    return found


def _add(context: TurnContext, arguments: dict) -> str:
    if context.origin != ORIGIN_CHAT:
        raise ToolError("Only a person's own request adds documents to a collection.")
    person = context.person
    name = " ".join(arguments["collection"].split())
    collection = Collection.objects.filter(name__iexact=name).first()
    if collection is None or person is None or not may_maintain(person, collection):
        # The same answer whether or not it exists: a non-maintainer learns nothing.
        raise ToolError(
            f"The person asking does not maintain a collection called {name}; only its "
            "maintainers add documents to it."
        )
    attachment = _file_in_chat(context, arguments.get("file") or "")
    try:
        document = attachment_add(attachment=attachment, collection=collection, by=person)
    except PermissionDenied as exc:
        raise ToolError(str(exc)) from None
    return (
        f"Added {attachment.name} to {collection.name} as {document.path}; it is being "
        "indexed and will be searchable in a moment."
    )


KNOWLEDGE_ADD = Tool(
    name="knowledge_add",
    description=ADD_DESCRIPTION,
    parameters=ADD_PARAMETERS,
    handler=_add,
    timeout_seconds=20,
)


class AddTools:
    """Offers `knowledge_add` only when the person asking maintains a collection."""

    def tools(self):
        return []

    def tools_for_turn(self, context: TurnContext):
        if context.origin != ORIGIN_CHAT or not maintained_by(context.person):
            return []
        return [KNOWLEDGE_ADD]


add_tools = AddTools()
