"""The guard that keeps a restricted collection's chats to its readers: while a collection
that not everyone may read is on in a chat, nobody who may not read it becomes a member of
that chat (by any path: the dashboard, the admin, a role sync). The join is refused with
MembershipRefused, a PermissionDenied whose message says why; turning the collection off
first lets them join. knowledge.access checks every use as well."""

from django.core.exceptions import PermissionDenied
from django.db.models.signals import pre_save

from chats.models import ChatMember


class MembershipRefused(PermissionDenied):
    """A person who may not read a collection on in the chat cannot join it."""


def _refuse_non_readers(sender, instance: ChatMember, raw=False, **kwargs) -> None:
    if raw or instance.pk is not None:
        return  # fixtures, and role changes of existing members
    from knowledge.access import may_read
    from knowledge.models import Collection

    restricted = Collection.objects.filter(
        chats_on__chat_id=instance.chat_id, everyone_may_read=False
    )
    for collection in restricted:
        if not may_read(instance.person, collection):
            raise MembershipRefused(
                f"{instance.person} may not read the knowledge collection {collection.name}, "
                "which is on in this chat: turn it off first, or make them a reader."
            )


def connect() -> None:
    pre_save.connect(_refuse_non_readers, sender=ChatMember, dispatch_uid="knowledge-join-guard")
