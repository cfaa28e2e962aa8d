"""The Telegram bridge process (`manage.py run_telegram_bot`).

Four loops on one event loop:

- **polling** (polling mode): getUpdates from the persisted offset; each update goes through
  `telegram_update_process` (one transaction: processed id, message, turn, outbox rows);
  the offset is saved after each batch. An update that keeps failing is skipped after a few
  attempts, so one bad update never blocks the bot.
- **outbox**: every open `OutboundMessage` (including those a stopped process left half
  done) is delivered by a task: replies stream, notices are one call. Replies to one
  Telegram chat and topic go one after another.
- **chat actions**: "typing…" in chats where another app works for a waiting person (a
  voice note being transcribed), as `bots.chat_actions` sources say.
- **events**: one channel-layer channel receives the events of every chat with a reply in
  progress and hands them to that reply's queue.

In webhook mode the web process receives updates (bots/views.py) and this process only
sends.
"""

import asyncio
import contextlib
import logging
import signal
import time
from collections import defaultdict

import redis.exceptions
from channels.layers import get_channel_layer
from django.conf import settings
from telegram import Bot, BotCommand
from telegram.error import Forbidden, InvalidToken, NetworkError, RetryAfter, TimedOut
from telegram.request import HTTPXRequest

from bots.channel import reply_row_failed
from bots.chat_actions import pending_chat_actions
from bots.commands import command_menu
from bots.delivery import (
    ChatGate,
    Permanent,
    ReplyDelivery,
    Sender,
    db,
    db_parallel,
    deliver_single,
    retry_seconds,
)
from bots.models import OutboundMessage
from bots.outbox import outbox_open, outbox_progress
from bots.services import (
    bot_state_save,
    polling_offset,
    polling_offset_save,
    processed_updates_prune,
    telegram_update_process,
)
from bots.updates import ALLOWED_UPDATES, BadUpdate, BotIdentity, ordering_key
from chats.agent.events import CHANNEL_MESSAGE_TYPE, chat_group_name
from chats.agent.runner import turn_runner
from chats.models import Turn

logger = logging.getLogger(__name__)

OUTBOX_POLL_SECONDS = 0.5
MAX_UPDATE_ATTEMPTS = 3


def update_lanes() -> int:
    """Updates of different chats are applied in parallel lanes (one chat always in one
    lane) on PostgreSQL; SQLite has one writer at a time, where lanes only add lock waits."""
    from django.db import connection

    return 1 if connection.vendor == "sqlite" else 4


MAX_DELIVERY_ATTEMPTS = 8
HOUSEKEEPING_SECONDS = 60  # how often the bridge prunes old processed update ids


def build_bot() -> Bot:
    """A python-telegram-bot client for the configured token and Bot API server."""
    base = settings.TELEGRAM_API_BASE_URL
    return Bot(
        settings.TELEGRAM_BOT_TOKEN,
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        request=HTTPXRequest(
            connection_pool_size=16, read_timeout=20, write_timeout=20, pool_timeout=10
        ),
        get_updates_request=HTTPXRequest(connection_pool_size=1, read_timeout=10),
    )


class EventRouter:
    """Subscribes the process to chats' event groups and fans events out to deliveries."""

    def __init__(self):
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.queues: dict[int, set[asyncio.Queue]] = defaultdict(set)
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Open this process's channel; without Redis replies rely on the database."""
        if self.layer is None:
            return
        try:
            self.channel = await self.layer.new_channel("telegram-bridge.")
        except Exception:  # noqa: BLE001 - Redis down: replies fall back to the database
            logger.warning("no channel layer: replies are sent when turns finish", exc_info=True)
            return
        self._task = asyncio.create_task(self._receive())

    async def subscribe(self, chat_id: int) -> asyncio.Queue:
        """A queue that receives the chat's events from now on."""
        queue: asyncio.Queue = asyncio.Queue()
        first = not self.queues[chat_id]
        self.queues[chat_id].add(queue)
        if first and self.channel:
            try:
                await self.layer.group_add(chat_group_name(chat_id), self.channel)
            except Exception:  # noqa: BLE001
                logger.warning("could not follow chat %s live", chat_id, exc_info=True)
        return queue

    async def unsubscribe(self, chat_id: int, queue: asyncio.Queue) -> None:
        """Stop feeding `queue`; leave the chat's group when nobody follows it."""
        self.queues[chat_id].discard(queue)
        if not self.queues[chat_id]:
            del self.queues[chat_id]
            if self.channel:
                with contextlib.suppress(Exception):
                    await self.layer.group_discard(chat_group_name(chat_id), self.channel)

    async def _receive(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except redis.exceptions.TimeoutError:
                # An idle channel with a read timeout no longer than channels_redis's 5 s
                # blocking pop ends in this error (settings avoid it; an override may not).
                # Nothing was lost.
                continue
            except Exception:  # noqa: BLE001 - Redis hiccup: the database check covers it
                logger.warning("channel layer receive failed; retrying", exc_info=True)
                await asyncio.sleep(1)
                continue
            if message.get("type") != CHANNEL_MESSAGE_TYPE:
                continue
            event = message.get("event") or {}
            for queue in list(self.queues.get(event.get("chat_id"), ())):
                queue.put_nowait(event)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _requeue_stuck_turns() -> int:
    """At start-up, turns of open replies still queued: their Celery task may be lost (the
    bot died between the commit and the enqueue). Enqueue again at once rather than after the
    sweep's grace; a turn runs at most once, so an extra task finds it claimed or finished."""
    turn_ids = list(
        OutboundMessage.objects.filter(
            kind=OutboundMessage.Kind.REPLY,
            status__in=OutboundMessage.OPEN,
            turn__status=Turn.Status.QUEUED,
        ).values_list("turn_id", flat=True)
    )
    for turn_id in turn_ids:
        try:
            turn_runner().enqueue(turn_id)
        except Exception:  # noqa: BLE001 - the next start tries again
            logger.warning("could not re-enqueue turn %s", turn_id, exc_info=True)
    return len(turn_ids)


class TelegramBridge:
    def __init__(self, *, bot: Bot | None = None, mode: str | None = None):
        self.bot = bot or build_bot()
        self.mode = mode or settings.TELEGRAM_MODE
        self.gate = ChatGate()
        self.sender = Sender(self.bot, self.gate)
        self.router = EventRouter()
        self.identity: BotIdentity | None = None
        self.stopping = asyncio.Event()
        self.wake = asyncio.Event()
        self.active: dict[int, asyncio.Task] = {}
        self.retry_at: dict[int, float] = {}
        self.chat_locks: dict[tuple[int, int | None], asyncio.Lock] = defaultdict(asyncio.Lock)
        self.update_failures: dict[int, int] = defaultdict(int)
        self.lanes = update_lanes()

    # lifecycle

    async def run(self) -> None:
        """Run until SIGINT/SIGTERM; whatever is half sent is finished by the next start."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stopping.set)
        await self._start()
        tasks = [asyncio.create_task(self._outbox_loop(), name="outbox")]
        tasks.append(asyncio.create_task(self._housekeeping(), name="housekeeping"))
        tasks.append(asyncio.create_task(self._chat_actions_loop(), name="chat actions"))
        if self.mode == "polling":
            tasks.append(asyncio.create_task(self._poll_loop(), name="polling"))
        logger.info("Telegram bridge running as @%s (%s)", self.identity.username, self.mode)
        print(f"Telegram bridge running as @{self.identity.username} ({self.mode})", flush=True)
        stop = asyncio.create_task(self.stopping.wait())
        done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        failed = [task for task in done if task is not stop and task.exception()]
        for task in [*tasks, *self.active.values(), stop]:
            task.cancel()
        await asyncio.gather(*tasks, *self.active.values(), return_exceptions=True)
        await self.router.stop()
        with contextlib.suppress(Exception):
            await self.bot.shutdown()
        if failed:
            raise failed[0].exception()

    async def _start(self) -> None:
        delay = 1.0
        while True:
            try:
                await self.bot.initialize()  # getMe
                break
            except InvalidToken:
                raise
            except NetworkError as exc:
                logger.warning("Bot API not reachable (%s); retrying in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)
        self.identity = BotIdentity(self.bot.id, self.bot.username or "")
        await db(bot_state_save, identity=self.identity)
        if self.mode == "webhook":
            await self.bot.set_webhook(
                url=settings.TELEGRAM_WEBHOOK_URL,
                secret_token=settings.TELEGRAM_WEBHOOK_SECRET,
                allowed_updates=ALLOWED_UPDATES,
            )
        else:
            await self.bot.delete_webhook(drop_pending_updates=False)
        with contextlib.suppress(NetworkError):
            # The bridge's own commands and those other apps register (e.g. /skills).
            await self.bot.set_my_commands(
                [BotCommand(name, text) for name, text in command_menu()]
            )
        await self.router.start()
        # At start every queued turn of ours counts: the previous process may have died
        # between committing a turn and handing it to Celery.
        count = await db(_requeue_stuck_turns)
        if count:
            logger.warning("re-enqueued %s turn(s) whose task was lost", count)

    # polling

    async def _poll_loop(self) -> None:
        offset = await db(polling_offset, bot_id=self.identity.bot_id)
        delay = 1.0
        while not self.stopping.is_set():
            try:
                updates = await self.bot.get_updates(
                    offset=offset or None,
                    timeout=settings.TELEGRAM_POLL_TIMEOUT_SECONDS,
                    allowed_updates=ALLOWED_UPDATES,
                )
                delay = 1.0
            except RetryAfter as exc:
                await asyncio.sleep(retry_seconds(exc))
                continue
            except TimedOut:
                continue
            except (InvalidToken, Forbidden):
                raise
            except NetworkError as exc:
                logger.warning("getUpdates failed (%s); retrying in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)
                continue
            offset = await self._process_batch(updates, offset)

    async def _process_batch(self, updates, offset: int) -> int:
        """Apply a getUpdates batch in lanes (one chat's updates in order, chats in
        parallel), then confirm it: the offset moves past every update that was applied
        or given up on, and stops before the first that must be retried."""
        lanes: dict[int, list] = defaultdict(list)
        for update in updates:
            lanes[ordering_key(update) % self.lanes].append(update)
        results = await asyncio.gather(*(self._process_lane(lane) for lane in lanes.values()))
        retry = [update_id for lane_retry in results for update_id in lane_retry]
        if updates:
            newest = max(update.update_id for update in updates) + 1
            offset = max(offset, min(retry) if retry else newest)
            self.wake.set()
        try:
            await db(polling_offset_save, bot_id=self.identity.bot_id, offset=offset)
        except Exception:  # noqa: BLE001 - the processed-update table still dedupes
            logger.warning("could not persist the polling offset", exc_info=True)
        if retry:
            await asyncio.sleep(1)
        return offset

    async def _process_lane(self, updates) -> list[int]:
        """Apply one lane's updates in order; returns the ids to retry (the first failure
        and everything after it in this lane)."""
        for index, update in enumerate(updates):
            try:
                await db_parallel(telegram_update_process, update, identity=self.identity)
            except BadUpdate as exc:
                logger.warning("skipped update %s: %s", update.update_id, exc)
            except Exception:  # noqa: BLE001 - the database may be down: retry, then skip
                self.update_failures[update.update_id] += 1
                attempts = self.update_failures[update.update_id]
                logger.exception("update %s failed (attempt %s)", update.update_id, attempts)
                if attempts < MAX_UPDATE_ATTEMPTS:
                    return [u.update_id for u in updates[index:]]
                logger.error("giving up on update %s after %s attempts", update.update_id, attempts)
            self.update_failures.pop(update.update_id, None)
            self.wake.set()
        return []

    # the outbox

    async def _outbox_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                rows = await db(outbox_open, exclude=set(self.active))
            except Exception:  # noqa: BLE001 - database down: try again shortly
                logger.warning("could not read the outbox", exc_info=True)
                rows = []
            now = time.monotonic()
            for row in rows:
                if self.retry_at.get(row.pk, 0) > now:
                    continue
                self.active[row.pk] = asyncio.create_task(self._deliver(row))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), OUTBOX_POLL_SECONDS)
            self.wake.clear()

    async def _deliver(self, row: OutboundMessage) -> None:
        try:
            if row.kind == OutboundMessage.Kind.REPLY:
                async with self.chat_locks[(row.telegram_chat_id, row.thread_id)]:
                    queue = await self.router.subscribe(row.chat_id)
                    try:
                        await ReplyDelivery(self.sender, row, queue).run()
                    finally:
                        await self.router.unsubscribe(row.chat_id, queue)
            else:
                await deliver_single(self.sender, row)
            self.retry_at.pop(row.pk, None)
        except asyncio.CancelledError:
            raise
        except Permanent as exc:
            logger.warning("outbox %s cannot be delivered: %s", row.pk, exc)
            await self._record_failure(row, str(exc), permanent=True)
        except Exception as exc:  # noqa: BLE001 - kept open and retried with backoff
            logger.warning("outbox %s failed: %s", row.pk, exc, exc_info=True)
            await self._record_failure(row, str(exc), permanent=False)
        finally:
            self.active.pop(row.pk, None)

    async def _record_failure(self, row: OutboundMessage, error: str, *, permanent: bool) -> None:
        attempts = row.attempts + 1
        give_up = permanent or attempts >= MAX_DELIVERY_ATTEMPTS
        fields = {"attempts": attempts, "error": error[:2000]}
        with contextlib.suppress(Exception):
            if give_up:
                # A reply given up on is reported (a scheduled run fails, its owner is told).
                fields["status"] = OutboundMessage.Status.FAILED
                await db(reply_row_failed, row=row, **fields)
            else:
                await db(outbox_progress, row=row, **fields)
        self.retry_at[row.pk] = time.monotonic() + min(2**attempts, 300)

    async def _chat_actions_loop(self) -> None:
        """Show the chat actions other apps ask for (`bots.chat_actions`: a voice note being
        transcribed), every TELEGRAM_TYPING_INTERVAL_SECONDS, except in chats whose reply is
        streaming (it types by itself)."""
        interval = settings.TELEGRAM_TYPING_INTERVAL_SECONDS
        while not self.stopping.is_set():
            try:
                actions = await db(pending_chat_actions)
            except Exception:  # noqa: BLE001 - database down: try again next round
                logger.warning("could not read the pending chat actions", exc_info=True)
                actions = []
            for action in actions:
                key = (action.telegram_chat_id, action.thread_id)
                if self.chat_locks[key].locked():
                    continue
                await self.sender.typing(
                    chat_id=action.telegram_chat_id,
                    thread_id=action.thread_id,
                    action=action.action,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), interval)

    async def _housekeeping(self) -> None:
        last_prune = 0.0
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), HOUSEKEEPING_SECONDS)
            # Turns whose task was lost while the bridge runs are the turn sweep's (Celery
            # beat, every TURN_SWEEP_SECONDS, for every channel); only start-up is ours.
            try:
                if time.monotonic() - last_prune > 3600:
                    pruned = await db(processed_updates_prune)
                    last_prune = time.monotonic()
                    if pruned:
                        logger.info("forgot %s processed update ids older than 3 days", pruned)
            except Exception:  # noqa: BLE001
                logger.warning("housekeeping failed", exc_info=True)
