"""Writes of team knowledge: collections, their readers, turning them on in chats. Every
change is audited (a KnowledgeEvent) in the same transaction. Documents are written by
knowledge.indexing and folders synced by knowledge.sync, which audit the same way.
"""

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from chats.models import Chat
from knowledge.access import DECIDER_ROLES, chat_may_use, collections_on, may_maintain, may_turn_on
from knowledge.models import ChatCollection, Collection, KnowledgeEvent

Kind = KnowledgeEvent.Kind
MAX_NAME = 100


def audit(
    collection: Collection,
    kind: str,
    *,
    by: AbstractBaseUser | None = None,
    document=None,
    document_path: str = "",
    sync_run=None,
    chat: Chat | None = None,
    **detail,
) -> KnowledgeEvent:
    """Write one audit event (callers are inside the transaction of the change)."""
    return KnowledgeEvent.objects.create(
        collection=collection,
        kind=kind,
        by=by if getattr(by, "pk", None) else None,
        document=document,
        document_path=document_path or (document.path if document is not None else ""),
        sync_run=sync_run,
        chat=chat,
        detail=detail,
    )


def _clean_name(name: str) -> str:
    name = " ".join((name or "").split())
    if not name or len(name) > MAX_NAME:
        raise ValidationError(f"A collection's name has 1 to {MAX_NAME} characters.")
    return name


def collection_create(
    *,
    name: str,
    by: AbstractBaseUser | None,
    readers: Iterable[AbstractBaseUser] = (),
    maintainers: Iterable[AbstractBaseUser] = (),
    everyone_may_read: bool = False,
    source_path: str = "",
    description: str = "",
) -> Collection:
    """Create a collection; its creator (when a person) maintains it. Audited."""
    name = _clean_name(name)
    with transaction.atomic():
        try:
            collection = Collection.objects.create(
                name=name,
                created_by=by if getattr(by, "pk", None) else None,
                everyone_may_read=everyone_may_read,
                source_path=source_path,
                description=description,
            )
        except IntegrityError as exc:
            raise ValidationError(f"A collection named {name!r} already exists.") from exc
        readers, maintainers = list(readers), list(maintainers)
        if getattr(by, "pk", None):
            maintainers.append(by)
        collection.readers.add(*readers)
        collection.maintainers.add(*maintainers)
        audit(
            collection,
            Kind.CREATED,
            by=by,
            readers=sorted(p.get_username() for p in readers),
            maintainers=sorted({p.get_username() for p in maintainers}),
            everyone_may_read=everyone_may_read,
            source_path=source_path,
        )
    return collection


def collection_add_readers(
    *, collection: Collection, people: Iterable[AbstractBaseUser], by: AbstractBaseUser | None
) -> list[str]:
    """Add readers (a maintainer's or the operator's act: `by` None is the operator at the
    server). Returns the usernames newly added; audited when any were."""
    if by is not None and not may_maintain(by, collection):
        raise PermissionDenied("Only a maintainer of the collection changes its readers.")
    people = list(people)
    with transaction.atomic():
        present = set(collection.readers.values_list("pk", flat=True))
        added = [p for p in people if p.pk not in present]
        if added:
            collection.readers.add(*added)
            audit(
                collection,
                Kind.READERS,
                by=by,
                added_readers=sorted(p.get_username() for p in added),
            )
    return [p.get_username() for p in added]


def collection_remove_readers(
    *, collection: Collection, people: Iterable[AbstractBaseUser], by: AbstractBaseUser | None
) -> list[str]:
    """Remove readers. A chat where they are members gets nothing more from the collection
    (knowledge.access checks every use). Audited."""
    if by is not None and not may_maintain(by, collection):
        raise PermissionDenied("Only a maintainer of the collection changes its readers.")
    people = list(people)
    with transaction.atomic():
        present = set(collection.readers.values_list("pk", flat=True))
        removed = [p for p in people if p.pk in present]
        if removed:
            collection.readers.remove(*removed)
            audit(
                collection,
                Kind.READERS,
                by=by,
                removed_readers=sorted(p.get_username() for p in removed),
            )
    return [p.get_username() for p in removed]


def collection_turn_on(
    *, collection: Collection, chat: Chat, by: AbstractBaseUser | None
) -> ChatCollection:
    """Turn `collection` on in `chat`. A person must be a decider of the chat who may read it,
    and the chat must pass the readers rule (knowledge.access); `by` None is the operator at
    the server (`manage.py knowledge enable`), for whom the readers rule still holds.
    Raises PermissionDenied with the reason. Idempotent; audited when it changes."""
    if by is not None:
        verdict = may_turn_on(by, chat, collection)
    else:
        verdict = chat_may_use(chat, collection)
    if not verdict:
        raise PermissionDenied(verdict.reason)
    with transaction.atomic():
        on, created = ChatCollection.objects.get_or_create(
            chat=chat,
            collection=collection,
            defaults={"enabled_by": by if getattr(by, "pk", None) else None},
        )
        if created:
            audit(collection, Kind.ENABLED, by=by, chat=chat, chat_key=chat.chat_key)
    return on


def collection_turn_off(
    *, collection: Collection, chat: Chat, by: AbstractBaseUser | None, reason: str = ""
) -> bool:
    """Turn `collection` off in `chat` (any decider of the chat, a maintainer, or the
    operator). True when it was on. Audited."""
    if (
        by is not None
        and not may_maintain(by, collection)
        and not chat.memberships.filter(person=by, role__in=DECIDER_ROLES).exists()
    ):
        raise PermissionDenied("Only an owner or admin of the chat turns knowledge off.")
    with transaction.atomic():
        deleted, _ = ChatCollection.objects.filter(chat=chat, collection=collection).delete()
        if deleted:
            audit(
                collection, Kind.DISABLED, by=by, chat=chat, chat_key=chat.chat_key, reason=reason
            )
    return bool(deleted)


def collection_touch(collection: Collection) -> None:
    Collection.objects.filter(pk=collection.pk).update(updated_at=timezone.now())


__all__ = [
    "audit",
    "collection_add_readers",
    "collection_create",
    "collection_remove_readers",
    "collection_touch",
    "collection_turn_off",
    "collection_turn_on",
    "collections_on",
]
