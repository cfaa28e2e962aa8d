"""The budgets app listens to the usage ledger (usage never imports this app): each record of
model work, once its transaction committed, is followed by the budget warnings it may cause
(`budgets.warnings`). A failure there is logged and never touches the recorded work.

It also listens to the engine: a turn gives up its last-mile claims (`budgets.lastmile`) once
its spend is stored, so that the next check of another turn sees it."""

import logging
from datetime import date
from functools import partial

from django.db import transaction
from django.db.models.signals import post_save
from django.utils import timezone

from budgets.lastmile import release
from budgets.warnings import budget_warnings_after_spend
from chats.signals import model_usage, turn_finished
from usage.models import Kind, UsageRecord

logger = logging.getLogger(__name__)


def on_usage_recorded(sender, instance: UsageRecord, created: bool, raw=False, **kwargs) -> None:
    """Model work with tokens was recorded: warn after commit (outside the recording's
    transaction, which may be a turn's). Tool calls spend nothing; rebuilt sums send nothing."""
    if raw or not created or instance.kind == Kind.TOOL:
        return
    if not (instance.prompt_tokens or instance.completion_tokens):
        return
    transaction.on_commit(
        partial(warn_after_commit, instance.person_id, instance.chat_id, instance.day),
        robust=True,
    )


def warn_after_commit(person_id: int | None, chat_id: int | None, day: date) -> None:
    now = timezone.now()
    if (day.year, day.month) != (now.year, now.month):
        return  # spend of a month that is over (or not begun): no cap of it holds anyone now
    try:
        budget_warnings_after_spend(person_id=person_id, chat_id=chat_id, now=now)
    except Exception:  # noqa: BLE001 - a warning lost, never the work
        logger.exception("budget warnings failed for person %s in chat %s", person_id, chat_id)


def release_when_stored(sender, *, kind, turn=None, **kwargs) -> None:
    """`model_usage` (sent inside the transaction that stores a turn's counters, when it ends
    or waits for a decision): release after that commit, not before (the next turn's check
    must see the spend)."""
    if kind == "turn" and turn is not None and turn.pk:
        transaction.on_commit(partial(release, turn.pk), robust=True)


def release_when_finished(sender, *, turn, **kwargs) -> None:
    """`turn_finished` (after commit): a turn that ends without usage (refused, failed before
    its call) holds nothing after it either."""
    release(turn.pk)


def connect() -> None:
    post_save.connect(on_usage_recorded, sender=UsageRecord, dispatch_uid="budgets-warnings")
    model_usage.connect(release_when_stored, dispatch_uid="budgets-lastmile-stored")
    turn_finished.connect(release_when_finished, dispatch_uid="budgets-lastmile-finished")
