"""Who may decide a proposal, and when a person's own request approves it at once."""

import re

from django.conf import settings

from chats.models import Actor, ChatMember
from memory.models import MemoryBook, Scope

APPROVAL_CHOICES = {
    Scope.USER: ("subject", "auto"),
    Scope.TEAM: ("staff", "auto"),
    Scope.CHAT: ("chat_admin", "auto"),
}


def approval_policy(scope: str) -> str:
    """The configured policy of `scope` (validated at startup by a system check)."""
    return {
        Scope.USER: settings.MEMORY_APPROVAL_USER,
        Scope.TEAM: settings.MEMORY_APPROVAL_TEAM,
        Scope.CHAT: settings.MEMORY_APPROVAL_CHAT,
    }[scope]


def _is_staff(person) -> bool:
    return bool(person and person.is_active and (person.is_staff or person.is_superuser))


def book_is_about(book: MemoryBook, *, person=None, actor: Actor | None = None) -> bool:
    """True if `book` is the user book of this person, or of this actor (or its Person)."""
    if book.scope != Scope.USER:
        return False
    if actor is not None and person is None:
        person = actor.person
    if book.person_id is not None:
        return person is not None and person.pk == book.person_id
    if actor is not None and actor.pk == book.actor_id:
        return True
    # An actor book whose actor has meanwhile been linked belongs to that Person.
    return person is not None and book.actor.person_id == person.pk


def may_review(book: MemoryBook, *, person=None, actor: Actor | None = None) -> bool:
    """May this person (or this channel actor) approve, reject or remove entries of `book`?

    User books: only the person they are about. Team: staff. Chat: staff, or an owner or
    admin of that chat. A deactivated person decides nothing."""
    if person is None and actor is not None:
        person = actor.person
    if person is not None and not person.is_active:
        return False
    if book.scope == Scope.USER:
        return book_is_about(book, person=person, actor=actor)
    if person is None:
        return False
    if _is_staff(person):
        return True
    if book.scope == Scope.CHAT:
        return ChatMember.objects.filter(
            chat_id=book.chat_id,
            person=person,
            role__in=[ChatMember.Role.OWNER, ChatMember.Role.ADMIN],
        ).exists()
    return False


# "Remember …", "don't forget …", "记住…" — and not "no need to remember", "别记住".
_REMEMBER = re.compile(
    r"(?<!not )(?<!n't )(?<!never )(?<!no need to )"
    r"\b(?:remember|memori[sz]e|keep in mind|make a note|take note|note (?:that|down)|"
    r"save (?:this|that|it)|(?:don't|do not|never) forget|for future reference)\b"
    r"|(?<![别不])记住|(?<![别不])记下|(?<![别不])记一下|别忘|不要忘",
    re.IGNORECASE,
)
_FORGET = re.compile(
    r"(?<!don't )(?<!do not )(?<!never )\bforget\b|\bstop remembering\b|"
    r"\b(?:remove|delete|erase|drop)\b[^.!?\n]{0,40}\b(?:memory|memories|remember)\b"
    r"|(?<![别不])忘掉|(?<![别不])忘记|别记|不要记|删掉|删除",
    re.IGNORECASE,
)
_UPDATE = re.compile(
    r"\b(?:update|change|correct|actually)\b|更新|改成|改为|其实",
    re.IGNORECASE,
)


def asked_to_remember(text: str) -> bool:
    """Did this message explicitly ask the agent to remember something?"""
    return bool(_REMEMBER.search(text or ""))


def asked_to_forget(text: str) -> bool:
    """Did this message explicitly ask the agent to forget something?"""
    return bool(_FORGET.search(text or ""))


def asked_for(change: str, text: str) -> bool:
    """Is `text` an explicit request for this kind of change (add, replace, remove)?"""
    if change == "add":
        return asked_to_remember(text)
    if change == "replace":
        return asked_to_remember(text) or bool(_UPDATE.search(text or ""))
    return asked_to_forget(text)
