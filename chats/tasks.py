"""Celery tasks of the chats app: running turns, held turns' timers, and the periodic turn
sweep (beat)."""

import gc
import logging

from celery import shared_task
from celery.signals import worker_process_init, worker_ready

from chats.agent.holds import RELEASE_TASK, turn_holds_release, turn_holds_release_due
from chats.agent.llm import get_provider
from chats.agent.loop import run_claimed_turn
from chats.agent.turns import Claim, turn_claim, turns_recover_stale, turns_sweep

logger = logging.getLogger(__name__)

BUSY_RETRY_SECONDS = 0.2
# Waiting for a running turn ends at the latest when its lease runs out and it is recovered;
# a turn whose task gave up (or was lost) is enqueued again by `sweep_turns`.
BUSY_MAX_RETRIES = 5000


@shared_task(bind=True, acks_late=True, max_retries=BUSY_MAX_RETRIES, ignore_result=True)
def run_turn(self, turn_id: int) -> str:
    """Run a queued turn once: a turn that already ran, or was marked interrupted, is never
    run again (a redelivered task finds it finished and does nothing)."""
    claim = turn_claim(turn_id=turn_id, worker=self.request.hostname or "worker")
    if claim.outcome is Claim.BUSY:
        raise self.retry(countdown=BUSY_RETRY_SECONDS)
    if claim.outcome is Claim.GONE:
        return "gone"
    if claim.outcome is Claim.PARKED:
        return "parked"  # behind a turn waiting for a decision: woken when it goes on
    turn = run_claimed_turn(claim.turn, provider=get_provider())
    return turn.status


@shared_task(ignore_result=True, acks_late=False)
def sweep_turns() -> dict:
    """Recover turns whose lease ran out and enqueue again queued turns whose task is gone
    (beat runs it every TURN_SWEEP_SECONDS); idempotent, cheap when nothing is due."""
    result = turns_sweep(enqueue=run_turn.delay)
    released = turn_holds_release_due()
    return {"recovered": result.recovered, "requeued": result.requeued, "released": released}


@shared_task(name=RELEASE_TASK, ignore_result=True)
def release_turn_hold(hold_id: int) -> bool:
    """A held message's timer (its quiet period or deadline): request its turn if it is
    ready now (docs/ATTACHMENTS.md, "The turn waits for its files"); at most once."""
    return turn_holds_release(hold_id=hold_id) is not None


@worker_ready.connect
def recover_turns_of_dead_workers(sender=None, **kwargs) -> None:
    """A starting worker marks turns left running by its previous life (or with an expired
    lease) as interrupted, so their chats take new messages at once."""
    hostname = getattr(sender, "hostname", None)
    count = turns_recover_stale(worker=hostname)
    if count:
        logger.warning("marked %s turn(s) of a dead worker as interrupted", count)


@worker_process_init.connect
def freeze_startup_objects(**kwargs) -> None:
    """Move what Django built at start-up out of the garbage collector's reach: full
    collections over it otherwise add ~100 ms spikes to context builds."""
    gc.collect()
    gc.freeze()
