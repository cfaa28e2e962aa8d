"""Notices for one person on their dashboard (`PersonNotice`): what the hub tells someone who
has no private chat with it on any channel, e.g. that a scheduled run of theirs failed. Only
that person reads or dismisses them; the chat list shows the newest open ones."""

from django.utils import timezone

from chats.models import PersonNotice

SHOWN = 20


def person_notice_post(*, person, text: str, kind: str) -> PersonNotice:
    """Leave `text` on `person`'s dashboard (in the caller's transaction)."""
    return PersonNotice.objects.create(person=person, kind=kind[:32], text=text)


def person_notices_open(person) -> list[PersonNotice]:
    """The newest notices `person` has not dismissed (none for anonymous people)."""
    if person is None or not getattr(person, "is_authenticated", False):
        return []
    return list(PersonNotice.objects.filter(person=person, dismissed_at__isnull=True)[:SHOWN])


def person_notice_dismiss(*, person, notice_id: int) -> bool:
    """Dismiss one of `person`'s own notices; False for anyone else's (or an unknown id)."""
    return bool(
        PersonNotice.objects.filter(pk=notice_id, person=person, dismissed_at__isnull=True).update(
            dismissed_at=timezone.now()
        )
    )
