"""Django admin for team knowledge: collections, documents, syncs and the audit trail, all
read-only (changes go through knowledge.services from the dashboard and the commands).

What staff read here follows the readers rule: a document's text is shown only to a staff
member who may read its collection (knowledge.access.may_read; superusers read every
collection's text, as they hold the database); anyone else sees that the document exists,
its path, state, reason, size and history, never its words, and search matches paths only.
Passages and citations have no admin pages at all. See docs/SECURITY.md#team-knowledge.
"""

from django.contrib import admin
from django.db.models import BooleanField, Case, Count, Value, When

from chats.admin import ReadOnlyAdmin
from knowledge.access import collections_readable_by
from knowledge.models import Collection, Document, KnowledgeEvent, SyncRun

HIDDEN = "(restricted collection you may not read: not shown)"
TEXT_SHOWN = 20_000


def readable_collection_ids(user) -> set[int] | None:
    """The collections whose text `user` may read here; None for every one (superusers)."""
    if user.is_active and user.is_superuser:
        return None
    return set(collections_readable_by(user).values_list("pk", flat=True))


@admin.register(Collection)
class CollectionAdmin(ReadOnlyAdmin):
    list_display = ("name", "everyone_may_read", "team_default", "documents", "source_path")
    search_fields = ("name",)
    fields = (
        "name",
        "description",
        "everyone_may_read",
        "team_default",
        "readers",
        "maintainers",
        "created_by",
        "source_path",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(document_total=Count("documents"))

    @admin.display(description="documents", ordering="document_total")
    def documents(self, collection: Collection) -> int:
        return collection.document_total


@admin.register(Document)
class DocumentAdmin(ReadOnlyAdmin):
    list_display = ("path", "collection", "state", "source", "size", "passage_count", "updated_at")
    list_filter = ("state", "source", "collection")
    list_select_related = ("collection",)
    search_fields = ("path",)  # never the text: a match would confirm what it says
    fields = (
        "collection",
        "path",
        "title",
        "source",
        "state",
        "reason",
        "content_hash",
        "size",
        "media_type",
        "page_count",
        "passage_count",
        "attachment_id",
        "indexed_at",
        "created_at",
        "updated_at",
        "text_shown",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        """Each row says whether this request's user may read its text, computed in the
        query (a ModelAdmin serves every request, so it keeps no reader state)."""
        queryset = super().get_queryset(request).defer("text")
        readable = readable_collection_ids(request.user)
        if readable is None:
            return queryset.annotate(text_readable=Value(True, output_field=BooleanField()))
        return queryset.annotate(
            text_readable=Case(
                When(collection_id__in=readable, then=Value(True)),
                default=Value(False),
                output_field=BooleanField(),
            )
        )

    @admin.display(description="text")
    def text_shown(self, document: Document) -> str:
        if not getattr(document, "text_readable", False):
            return HIDDEN
        return (document.text or "")[:TEXT_SHOWN]


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "collection", "trigger", "state", "counts", "by", "finished_at")
    list_filter = ("state", "trigger")
    list_select_related = ("collection", "by")
    ordering = ("-id",)


@admin.register(KnowledgeEvent)
class KnowledgeEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "collection", "kind", "document_path", "by", "chat")
    list_filter = ("kind",)
    list_select_related = ("collection", "by", "chat")
    search_fields = ("document_path", "collection__name")
    ordering = ("-id",)
    fields = (
        "created_at",
        "collection",
        "kind",
        "document",
        "document_path",
        "sync_run",
        "chat",
        "by",
        "detail",
    )
    readonly_fields = fields
