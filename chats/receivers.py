"""Model-signal receivers of the chats app: whoever loses access to a chat (a membership
deleted anywhere: the dashboard, the admin, a script; a person deactivated) has their live
connections to it closed once the change commits; a person whose login sessions change (a
logout, a password change anywhere) has the connections of ended sessions closed."""

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from chats.agent.events import announce_access_change, announce_sessions_changed
from chats.models import ChatMember


def _announce_after_commit(chat_ids) -> None:
    for chat_id in set(chat_ids):
        transaction.on_commit(lambda chat_id=chat_id: announce_access_change(chat_id))


def membership_deleted(sender, instance: ChatMember, **kwargs) -> None:
    _announce_after_commit([instance.chat_id])


def person_saved(sender, instance, created: bool, update_fields=None, **kwargs) -> None:
    if created:
        return
    if update_fields is None or "password" in update_fields:
        # Perhaps a new password: sessions logged in with the old one stop authenticating
        # (Django's session hash), and so do their sockets. A save that changed nothing
        # only makes the sockets check once.
        person_id = instance.pk
        transaction.on_commit(lambda: announce_sessions_changed(person_id))
    if instance.is_active:
        return
    if update_fields is not None and "is_active" not in update_fields:
        return  # e.g. last_login: not a deactivation
    chat_ids = ChatMember.objects.filter(person=instance).values_list("chat_id", flat=True)
    _announce_after_commit(list(chat_ids))


def logged_out(sender, request, user, **kwargs) -> None:
    # Sent before the session is flushed: name it, so its sockets close without a race.
    if user is None:
        return
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    announce_sessions_changed(user.pk, ended_session=session_key)


def connect() -> None:
    post_delete.connect(membership_deleted, sender=ChatMember, dispatch_uid="chats-member-gone")
    post_save.connect(person_saved, sender=get_user_model(), dispatch_uid="chats-person-saved")
    user_logged_out.connect(logged_out, dispatch_uid="chats-person-logged-out")
