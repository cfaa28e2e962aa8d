"""Model-signal receivers of the chats app: whoever loses access to a chat (a membership
deleted anywhere: the dashboard, the admin, a script; a person deactivated) has their live
connections to it closed once the change commits."""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from chats.agent.events import announce_access_change
from chats.models import ChatMember


def _announce_after_commit(chat_ids) -> None:
    for chat_id in set(chat_ids):
        transaction.on_commit(lambda chat_id=chat_id: announce_access_change(chat_id))


def membership_deleted(sender, instance: ChatMember, **kwargs) -> None:
    _announce_after_commit([instance.chat_id])


def person_saved(sender, instance, created: bool, update_fields=None, **kwargs) -> None:
    if created or instance.is_active:
        return
    if update_fields is not None and "is_active" not in update_fields:
        return  # e.g. last_login: not a deactivation
    chat_ids = ChatMember.objects.filter(person=instance).values_list("chat_id", flat=True)
    _announce_after_commit(list(chat_ids))


def connect() -> None:
    post_delete.connect(membership_deleted, sender=ChatMember, dispatch_uid="chats-member-gone")
    post_save.connect(person_saved, sender=get_user_model(), dispatch_uid="chats-person-saved")
