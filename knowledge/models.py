"""Team knowledge: collections of documents split into passages that the agent searches and
cites, readable only by the collection's readers (docs/KNOWLEDGE.md).

A **Collection** is a named set of documents with readers and maintainers (or open to
everyone). A **Document** is one file of it, with its content hash, state and extracted
text; a **Passage** is one piece of a document along its structure (heading path, page),
the unit of search and citation. A **SyncRun** records one pass over a folder; every change
is a **KnowledgeEvent** written in the same transaction by `knowledge.services`. A
**ChatCollection** says a collection is on in a chat, and who turned it on.

The full-text index (FTS5 on SQLite, a tsvector GIN index on PostgreSQL) and the pgvector
column live beside these tables, created by hand-written migrations (0002).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from chats.models import Chat


class Collection(models.Model):
    """A named set of documents; its readers rule decides who may ever read a passage."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    everyone_may_read = models.BooleanField(
        default=False, help_text="Every active person may read it (readers are then ignored)."
    )
    # On in every chat without anyone turning it on: only for collections everyone may read.
    team_default = models.BooleanField(default=False)
    readers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="knowledge_readable"
    )
    maintainers = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="knowledge_maintained"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="knowledge_created",
    )
    # The folder a periodic sync reads ("" for collections fed only by uploads).
    source_path = models.CharField(max_length=1000, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(team_default=False) | Q(everyone_may_read=True),
                name="knowledge_team_default_only_open",
            )
        ]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Waiting to be indexed"
        READY = "ready", "Indexed"
        FAILED = "failed", "Not indexed"

    class Source(models.TextChoices):
        UPLOAD = "upload", "Uploaded"
        ATTACHMENT = "attachment", "From a chat attachment"
        FOLDER = "folder", "From a folder on the server"

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="documents")
    # Relative to the collection's folder for folder documents ("runbooks/disk.md"); the file
    # name (with the upload's folder) otherwise. Always "/"-separated.
    path = models.CharField(max_length=1000)
    title = models.CharField(max_length=300, blank=True, default="")
    source = models.CharField(max_length=16, choices=Source.choices)
    content_hash = models.CharField(max_length=64, blank=True, default="")  # sha256 hex
    size = models.BigIntegerField(default=0)
    media_type = models.CharField(max_length=255, blank=True, default="")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    reason = models.TextField(blank=True, default="")  # why it failed, in a person's words
    # Pages joined by form feeds, as attachments store it (docs/ATTACHMENTS.md#extraction).
    text = models.TextField(blank=True, default="")
    page_count = models.PositiveIntegerField(default=0)
    passage_count = models.PositiveIntegerField(default=0)
    # The attachment a maintainer added from a chat (kept by id: attachments may be swept).
    attachment_id = models.BigIntegerField(null=True, blank=True)
    indexed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["collection_id", "path"]
        constraints = [
            models.UniqueConstraint(fields=["collection", "path"], name="knowledge_document_path")
        ]
        indexes = [models.Index(fields=["state", "id"], name="knowledge_document_state")]

    def __str__(self) -> str:
        return f"{self.collection.name}: {self.path}"


def place_label(path: str, section: str = "", page: int | None = None) -> str:
    """Where a passage is, as every citation names it: document § section (p. N)."""
    label = path
    if section:
        label += f" § {section}"
    if page:
        label += f" (p. {page})"
    return label


class Passage(models.Model):
    """One piece of a document: the unit that is searched, offered and cited."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="passages")
    # Denormalised from the document: search filters on it without a join.
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="passages")
    ordinal = models.PositiveIntegerField()
    # The heading path ("Disk › Full disk") or section label; shown in citations.
    section = models.CharField(max_length=500, blank=True, default="")
    page = models.PositiveIntegerField(null=True, blank=True)  # 1-based, when it has pages
    text = models.TextField()
    # What the full-text index reads: section + text with CJK runs as character bigrams.
    search_text = models.TextField(default="")
    token_count = models.PositiveIntegerField(default=0)
    # float32 little-endian, L2-normalised; empty until embedded. `embedding_model` names the
    # model (a vector of another model is never compared with this one's).
    embedding = models.BinaryField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["document_id", "ordinal"]
        constraints = [
            models.UniqueConstraint(fields=["document", "ordinal"], name="knowledge_passage_ord")
        ]
        indexes = [models.Index(fields=["collection", "id"], name="knowledge_passage_coll")]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.ordinal} {self.section}"


class SyncRun(models.Model):
    """One pass of a folder into a collection; a crashed run is resumed by the next one."""

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"

    class Trigger(models.TextChoices):
        COMMAND = "command", "manage.py knowledge sync"
        PERIODIC = "periodic", "Periodic re-sync"
        UPLOAD = "upload", "Upload"

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="syncs")
    path = models.CharField(max_length=1000)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    # added, changed, unchanged, removed, failed, skipped: counted as the run goes.
    counts = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"sync #{self.pk} of {self.collection_id} ({self.state})"


class KnowledgeEvent(models.Model):
    """The audit trail: every change to a collection, its readers, documents and chats."""

    class Kind(models.TextChoices):
        CREATED = "created", "Collection created"
        READERS = "readers", "Readers or maintainers changed"
        SETTINGS = "settings", "Settings changed"
        DOCUMENT_ADDED = "document_added", "Document added"
        DOCUMENT_CHANGED = "document_changed", "Document changed"
        DOCUMENT_REMOVED = "document_removed", "Document removed"
        DOCUMENT_FAILED = "document_failed", "Document not indexed"
        DOCUMENT_INDEXED = "document_indexed", "Document indexed"
        SYNC_STARTED = "sync_started", "Sync started"
        SYNC_FINISHED = "sync_finished", "Sync finished"
        ENABLED = "enabled", "Turned on in a chat"
        DISABLED = "disabled", "Turned off in a chat"

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=24, choices=Kind.choices)
    document = models.ForeignKey(
        Document, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    document_path = models.CharField(max_length=1000, blank=True, default="")
    sync_run = models.ForeignKey(
        SyncRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="knowledge_events"
    )
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["collection", "-id"], name="knowledge_event_coll")]

    def __str__(self) -> str:
        return f"{self.kind} {self.document_path or self.collection_id}"


class ChatCollection(models.Model):
    """A collection is on in a chat: its passages may be searched and offered there."""

    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="knowledge_on")
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="chats_on")
    enabled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    enabled_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chat", "collection"], name="knowledge_chat_collection")
        ]

    def __str__(self) -> str:
        return f"{self.collection_id} on in {self.chat_id}"


class Citation(models.Model):
    """A passage an agent's reply cited (`[K<id>]`), as it was when the reply was stored:
    passages are replaced when their document changes, so the citation keeps the document,
    its section and its content hash, from which the dashboard links to the document viewer
    (for readers only) and says "changed since" (knowledge.citations)."""

    message = models.ForeignKey(
        "chats.Message", on_delete=models.CASCADE, related_name="knowledge_citations"
    )
    passage_id = models.BigIntegerField()
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="citations")
    document = models.ForeignKey(
        Document, null=True, on_delete=models.SET_NULL, related_name="citations"
    )
    document_path = models.CharField(max_length=1000)
    section = models.CharField(max_length=500, blank=True, default="")
    page = models.PositiveIntegerField(null=True, blank=True)
    content_hash = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["message", "passage_id"], name="knowledge_citation_once"
            )
        ]

    def __str__(self) -> str:
        return f"K{self.passage_id} in {self.message_id}"


class WordVector(models.Model):
    """One word's vector from a model, kept for the static embedder
    (knowledge.static_embeddings): a word is embedded once per model, by whichever process
    meets it first, and every worker reads it from here after that."""

    model = models.CharField(max_length=200)
    word = models.CharField(max_length=100)
    # float16 little-endian, as the model made it (not normalised again).
    vector = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["model", "word"], name="knowledge_wordvector_once")
        ]

    def __str__(self) -> str:
        return f"{self.model}: {self.word}"
