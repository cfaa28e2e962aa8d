"""Who may talk to the bot: the allow-lists, pairing requests (a stranger gets a code a
staff member approves) and /link codes that tie a Telegram account to a dashboard login."""

import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from telegram import Message as TgMessage

from bots.models import LinkCode, PairingRequest, hash_link_code
from bots.outbox import UpdateOutcome, notice, outbox_send
from bots.updates import Place, display_name
from chats.models import Actor
from chats.services import actor_link

logger = logging.getLogger(__name__)

PAIRING_NOTICE_EVERY = timedelta(minutes=10)
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud safely


# --- access -----------------------------------------------------------------------------


def user_allowed(*, user_id: int, actor: Actor | None = None) -> bool:
    """Allow-listed, approved by pairing, or linked to an active dashboard Person."""
    if str(user_id) in settings.TELEGRAM_ALLOWED_USERS:
        return True
    if actor is not None and actor.person_id is not None:
        person = actor.person
        if person is not None and person.is_active:
            return True
    return PairingRequest.objects.filter(
        user_id=user_id, status=PairingRequest.Status.APPROVED
    ).exists()


def chat_allowed(*, telegram_chat_id: int) -> bool:
    """Groups work only when listed in TELEGRAM_ALLOWED_CHATS."""
    return str(telegram_chat_id) in settings.TELEGRAM_ALLOWED_CHATS


# --- pairing ----------------------------------------------------------------------------


def _new_code(length: int = 8) -> str:
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(length))
    return f"{raw[:4]}-{raw[4:]}"


def pairing_notice(place: Place, message: TgMessage) -> UpdateOutcome:
    user = message.from_user
    request, created = PairingRequest.objects.get_or_create(
        user_id=user.id,
        defaults={
            "display_name": display_name(user)[:255],
            "username": (user.username or "")[:64],
            "code": _new_code(),
        },
    )
    if request.status == PairingRequest.Status.REJECTED:
        return UpdateOutcome("ignored:rejected user")
    now = timezone.now()
    if not created and request.created_at > now - PAIRING_NOTICE_EVERY:
        return UpdateOutcome("pairing:waiting")
    if not created:
        PairingRequest.objects.filter(pk=request.pk).update(created_at=now)
    text = (
        "Hi! I don't know you yet. Your pairing code is "
        f"<code>{request.code}</code>. Ask someone on the team to approve it on the hub's "
        "dashboard (Telegram page); I will tell you when you're in.\n\n"
        "Already have a dashboard login? Create a link code there and send /link CODE."
    )
    return UpdateOutcome("pairing:code", outbound=[notice(place, message, text)])


def pairing_decide(
    *, request_id: int, approve: bool, staff: AbstractBaseUser
) -> PairingRequest | None:
    """Approve (the user may talk to the bot from now on, and is told so) or reject a
    pending pairing request; None when it is gone or already decided."""
    with transaction.atomic():
        request = (
            PairingRequest.objects.select_for_update()
            .filter(pk=request_id, status=PairingRequest.Status.PENDING)
            .first()
        )
        if request is None:
            return None
        request.status = (
            PairingRequest.Status.APPROVED if approve else PairingRequest.Status.REJECTED
        )
        request.decided_at = timezone.now()
        request.decided_by = staff
        request.save(update_fields=["status", "decided_at", "decided_by"])
        if approve:
            outbox_send(
                telegram_chat_id=request.user_id,
                text="You're in: your pairing request was approved. Say hello!",
            )
    logger.info("pairing of Telegram user %s %s by %s", request.user_id, request.status, staff)
    return request


def pairing_revoke(*, request_id: int, staff: AbstractBaseUser) -> bool:
    """Withdraw an approval: the user gets a pairing code again on their next message."""
    with transaction.atomic():
        deleted, _ = PairingRequest.objects.filter(
            pk=request_id, status=PairingRequest.Status.APPROVED
        ).delete()
    if deleted:
        logger.info("pairing %s revoked by %s", request_id, staff)
    return bool(deleted)


# --- linking ----------------------------------------------------------------------------


def link_code_create(*, person: AbstractBaseUser) -> tuple[LinkCode, str]:
    """A fresh one-time /link code for `person` (earlier open codes stop working); the raw
    code is returned once, only its hash is stored."""
    with transaction.atomic():
        LinkCode.objects.filter(person=person, used_at__isnull=True).delete()
        raw = _new_code()
        code = LinkCode.objects.create(
            person=person,
            code_hash=hash_link_code(raw),
            expires_at=timezone.now() + timedelta(minutes=settings.TELEGRAM_LINK_CODE_TTL_MINUTES),
        )
    return code, raw


def telegram_link(*, actor: Actor, code: str) -> AbstractBaseUser | None:
    """Link `actor` to the Person who created `code`, once; None for an unknown, used or
    expired code (or an inactive person)."""
    with transaction.atomic():
        link = (
            LinkCode.objects.select_for_update()
            .select_related("person")
            .filter(code_hash=hash_link_code(code))
            .first()
        )
        if link is None or not link.is_usable or not link.person.is_active:
            return None
        link.used_at = timezone.now()
        link.used_by = actor
        link.save(update_fields=["used_at", "used_by"])
        actor_link(actor=actor, person=link.person)
    return link.person
