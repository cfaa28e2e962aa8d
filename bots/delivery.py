"""Sending the outbox to Telegram: streamed replies and single calls (the bot process side).

A reply follows its turn's events (the chat's channel-layer group, with catch-up from the
replay buffer, and the database as the source of truth when events are missing). It sends
one message when the first text arrives and edits it at most once per
TELEGRAM_EDIT_INTERVAL_SECONDS while the model writes; 429 `retry_after` pauses every call
to that chat. The final text is sent as Telegram HTML, split into parts that fit, each part
recorded with its Telegram message id as soon as it is sent, so a restarted bot continues
where the previous one stopped instead of sending again. A part Telegram cannot parse is
sent as plain text. Every call carries the forum topic's thread id.

The reply's files (what `chats.reply_files` says the reply message carries: the agent's
`file_send`) follow the text, in order, one upload each: `sendPhoto` for a PNG, JPEG or
WebP under 10 MB, `sendDocument` otherwise (a photo Telegram refuses is sent again as a
document), multipart with the file's own name. Each file's outcome is recorded on the row
(`payload["files"]`) as it happens. A file Telegram refuses (400, 413, over its 50 MB upload
limit) is told in the chat and recorded `failed`, and the row then ends `failed`, never
`delivered`, with every part's message id in the receipt.
"""

import asyncio
import logging
import time
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from telegram import Bot, InlineKeyboardMarkup, InputFile, LinkPreviewOptions, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError
from telegram.warnings import PTBDeprecationWarning

from bots.channel import reply_row_delivered, reply_row_failed
from bots.models import OutboundMessage
from bots.outbox import outbox_progress
from bots.selectors import TurnOutcome, turn_outbound_text, turn_outcome, turn_reply_files
from chats.agent.events import events_since
from chats.agent.turns import SUPERSEDED
from chats.extras import has_outbound_draft, outbound_draft_text
from chats.reply_files import ReplyFile

logger = logging.getLogger(__name__)

DB_CHECK_SECONDS = 2.0
PHOTO_TYPES = {"image/png", "image/jpeg", "image/webp"}
PHOTO_MAX_BYTES = 10 * 1000 * 1000  # the Bot API's limit for sendPhoto
UPLOAD_MAX_BYTES = 50 * 1000 * 1000  # the Bot API's limit for any upload
MAX_CALL_ATTEMPTS = 6
FINAL_EVENTS = {"turn.finished": "completed", "turn.failed": "failed"}


def _fmt():
    from bots import telegram_format

    return telegram_format


async def db(function: Callable, *args, **kwargs):
    """Run ORM code off the event loop, on a connection that is still alive."""

    def call():
        close_old_connections()
        return function(*args, **kwargs)

    return await sync_to_async(call, thread_sensitive=True)()


async def db_parallel(function: Callable, *args, **kwargs):
    """Like `db`, on a pool thread with its own connection, so lanes run side by side."""

    def call():
        close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    return await sync_to_async(call, thread_sensitive=False)()


async def record_sent(row: OutboundMessage, **fields) -> None:
    """Record what Telegram accepted right away, on a connection of its own: until this
    commits, a crash would make the next process send that part again."""
    await db_parallel(outbox_progress, row=row, **fields)


def retry_seconds(error: RetryAfter) -> float:
    """Seconds Telegram asks to wait, whichever type this PTB version uses."""
    with warnings.catch_warnings():  # PTB 22 moves it to timedelta: either is fine
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = error.retry_after
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def _cut_utf16(text: str, limit: int) -> str:
    if len(text.encode("utf-16-le")) // 2 <= limit:
        return text
    encoded = text.encode("utf-16-le")[: (limit - 1) * 2]
    return encoded.decode("utf-16-le", errors="ignore") + "…"


class Permanent(Exception):
    """Telegram refused for good (blocked by the user, chat or topic gone): do not retry."""


class FileRefused(Exception):
    """Telegram will not take this file (400, 413 or over its size limit): tell the chat."""


class ChatGate:
    """Flood control per Telegram chat: after a 429 nothing goes to that chat until
    `retry_after` has passed."""

    def __init__(self):
        self.blocked_until: dict[int, float] = {}

    def remaining(self, chat_id: int) -> float:
        return max(0.0, self.blocked_until.get(chat_id, 0.0) - time.monotonic())

    def block(self, chat_id: int, seconds: float) -> None:
        until = time.monotonic() + seconds
        self.blocked_until[chat_id] = max(self.blocked_until.get(chat_id, 0.0), until)

    async def wait(self, chat_id: int) -> None:
        while (remaining := self.remaining(chat_id)) > 0:
            await asyncio.sleep(remaining)


async def api_call(gate: ChatGate, chat_id: int, call: Callable[[], Awaitable]):
    """One Bot API call to `chat_id`, waiting out 429s and retrying network errors.

    BadRequest is raised to the caller (it decides: plain text, not modified, …)."""
    delay = 0.5
    for attempt in range(1, MAX_CALL_ATTEMPTS + 1):
        await gate.wait(chat_id)
        try:
            return await call()
        except RetryAfter as exc:
            seconds = retry_seconds(exc)
            logger.warning("Telegram asks to wait %.1f s before writing to %s", seconds, chat_id)
            gate.block(chat_id, seconds)
        except BadRequest:
            raise
        except Forbidden as exc:
            raise Permanent(str(exc)) from exc
        except NetworkError:
            if attempt == MAX_CALL_ATTEMPTS:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10)
    raise NetworkError("gave up after repeated flood-control waits")


def link_previews() -> LinkPreviewOptions | None:
    """Link previews of every message and edit the bot sends: off unless
    TELEGRAM_LINK_PREVIEWS, so no URL in a reply is fetched before somebody clicks it."""
    return None if settings.TELEGRAM_LINK_PREVIEWS else LinkPreviewOptions(is_disabled=True)


def _is(error: BadRequest, *fragments: str) -> bool:
    text = str(error).lower()
    return any(fragment in text for fragment in fragments)


class Sender:
    """The Bot API calls of the bridge, each with thread id, flood control and fallbacks."""

    def __init__(self, bot: Bot, gate: ChatGate):
        self.bot = bot
        self.gate = gate

    async def send(
        self,
        *,
        chat_id: int,
        thread_id: int | None,
        html: str,
        plain: str,
        reply_to: int | None = None,
        markup: dict | None = None,
    ) -> int:
        """Send HTML (plain text if Telegram cannot parse it); returns the message id."""
        reply = (
            ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
            if reply_to
            else None
        )
        keyboard = InlineKeyboardMarkup.de_json(markup, self.bot) if markup else None

        async def attempt(text: str, parse_mode: str | None):
            return await api_call(
                self.gate,
                chat_id,
                lambda: self.bot.send_message(
                    chat_id=chat_id,
                    text=text,
                    parse_mode=parse_mode,
                    link_preview_options=link_previews(),
                    message_thread_id=thread_id,
                    reply_parameters=reply,
                    reply_markup=keyboard,
                ),
            )

        try:
            message = await attempt(html, ParseMode.HTML if html != plain else None)
        except BadRequest as exc:
            if not _is(exc, "parse entities", "too long", "unsupported start tag"):
                if _is(exc, "thread not found", "chat not found"):
                    raise Permanent(str(exc)) from exc
                raise
            logger.info("Telegram refused the HTML of a message (%s): sent as plain text", exc)
            message = await attempt(_cut_utf16(plain, _fmt().TELEGRAM_LIMIT), None)
        return message.message_id

    async def edit(
        self,
        *,
        chat_id: int,
        message_id: int,
        html: str,
        plain: str,
        markup: dict | None = None,
    ) -> bool:
        """Edit a message to HTML (plain text if refused); False if the message is gone."""
        keyboard = InlineKeyboardMarkup.de_json(markup, self.bot) if markup else None

        async def attempt(text: str, parse_mode: str | None):
            return await api_call(
                self.gate,
                chat_id,
                lambda: self.bot.edit_message_text(
                    chat_id=chat_id,
                    message_id=message_id,
                    text=text,
                    parse_mode=parse_mode,
                    link_preview_options=link_previews(),
                    reply_markup=keyboard,
                ),
            )

        try:
            await attempt(html, ParseMode.HTML if html != plain else None)
        except BadRequest as exc:
            if _is(exc, "not modified"):
                return True
            if _is(exc, "message to edit not found", "message can't be edited"):
                return False
            if not _is(exc, "parse entities", "too long", "unsupported start tag"):
                raise
            logger.info("Telegram refused the HTML of an edit (%s): plain text instead", exc)
            try:
                await attempt(_cut_utf16(plain, _fmt().TELEGRAM_LIMIT), None)
            except BadRequest as again:
                if not _is(again, "not modified"):
                    raise
        return True

    async def send_file(
        self, *, chat_id: int, thread_id: int | None, file: ReplyFile, data: bytes
    ) -> int:
        """Upload one file (a photo when Telegram shows it as one); returns the message id.
        FileRefused when Telegram will not take it; network errors are retried."""
        if len(data) > UPLOAD_MAX_BYTES:
            raise FileRefused(f"it is larger than Telegram's {UPLOAD_MAX_BYTES // 10**6} MB limit")
        as_photo = file.media_type in PHOTO_TYPES and len(data) < PHOTO_MAX_BYTES

        async def upload(method: str):
            try:
                sent = getattr(self.bot, method)
                field = "photo" if method == "send_photo" else "document"
                return await sent(
                    chat_id=chat_id,
                    message_thread_id=thread_id,
                    **{field: InputFile(data, filename=file.name)},
                )
            except BadRequest as exc:
                if _is(exc, "thread not found", "chat not found"):
                    raise Permanent(str(exc)) from exc
                raise FileRefused(str(exc)) from exc
            except NetworkError as exc:  # PTB reports a 413 as a NetworkError
                if _is(exc, "too large", "too big"):
                    raise FileRefused(str(exc)) from exc
                raise

        if as_photo:
            try:
                message = await api_call(self.gate, chat_id, lambda: upload("send_photo"))
                return message.message_id
            except FileRefused as exc:  # dimensions Telegram dislikes: as a document then
                logger.info(
                    "Telegram refused %s as a photo (%s): sent as a document", file.name, exc
                )
        message = await api_call(self.gate, chat_id, lambda: upload("send_document"))
        return message.message_id

    async def typing(
        self, *, chat_id: int, thread_id: int | None, action: str = ChatAction.TYPING
    ) -> None:
        """Best effort: a failed typing indicator (or another chat action) never delays a
        reply."""
        if self.gate.remaining(chat_id) > 0:
            return
        try:
            await asyncio.wait_for(
                self.bot.send_chat_action(
                    chat_id=chat_id, action=action, message_thread_id=thread_id
                ),
                timeout=5,
            )
        except RetryAfter as exc:
            self.gate.block(chat_id, retry_seconds(exc))
        except (TelegramError, TimeoutError) as exc:
            logger.debug("typing indicator for %s failed: %s", chat_id, exc)


async def deliver_single(sender: Sender, row: OutboundMessage) -> None:
    """One sendMessage / editMessageText / answerCallbackQuery row of the outbox."""
    payload = row.payload
    if row.kind == OutboundMessage.Kind.ANSWER:
        try:
            await api_call(
                sender.gate,
                row.telegram_chat_id,
                lambda: sender.bot.answer_callback_query(
                    callback_query_id=payload["callback_query_id"], text=payload.get("text")
                ),
            )
        except BadRequest as exc:  # "query is too old": nobody waits for it any more
            logger.info("callback answer %s not delivered: %s", row.pk, exc)
        await db(outbox_progress, row=row, status=OutboundMessage.Status.DELIVERED)
        return
    is_html = payload.get("parse_mode") == ParseMode.HTML
    text = payload["text"]
    plain = _fmt().plain_text_fallback(text) if is_html else text
    html = text if is_html else plain
    if row.kind == OutboundMessage.Kind.EDIT:
        await sender.edit(
            chat_id=row.telegram_chat_id,
            message_id=payload["message_id"],
            html=html,
            plain=_strip_tags(text) if is_html else text,
            markup=payload.get("reply_markup"),
        )
        await db(outbox_progress, row=row, status=OutboundMessage.Status.DELIVERED, text=text)
        return
    message_id = await sender.send(
        chat_id=row.telegram_chat_id,
        thread_id=row.thread_id,
        html=html,
        plain=_strip_tags(text) if is_html else text,
        reply_to=row.reply_to_message_id,
        markup=payload.get("reply_markup"),
    )
    await record_sent(
        row,
        status=OutboundMessage.Status.DELIVERED,
        message_ids=[message_id],
        parts_sent=1,
        text=text,
    )


def _strip_tags(text: str) -> str:
    """Plain text of our own notice HTML (only simple tags and entities)."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", text))


class EventFeed:
    """Events of one chat for one delivery, in seq order, each once (live + catch-up)."""

    def __init__(self, chat_id: int, queue: asyncio.Queue):
        self.chat_id = chat_id
        self.queue = queue
        self.last_seq = 0

    async def catch_up(self) -> list[dict]:
        """Events still in the replay buffer after the last one seen."""
        missed = await db(events_since, self.chat_id, self.last_seq)
        fresh = [event for event in missed if event["seq"] > self.last_seq]
        if fresh:
            self.last_seq = fresh[-1]["seq"]
        return fresh

    async def next(self, timeout: float) -> list[dict]:
        """The next new events (none after `timeout`), gaps filled from the buffer."""
        try:
            event = await asyncio.wait_for(self.queue.get(), timeout=max(timeout, 0.01))
        except TimeoutError:
            return []
        seq = event.get("seq", 0)
        if seq <= self.last_seq:
            return []
        if seq > self.last_seq + 1 and self.last_seq:
            return await self.catch_up()  # a gap: the buffer has what we missed (and this)
        self.last_seq = seq
        return [event]


class ReplyDelivery:
    """Streams one turn's answer into one Telegram chat (see the module docstring)."""

    def __init__(self, sender: Sender, row: OutboundMessage, queue: asyncio.Queue | None):
        self.sender = sender
        self.row = row
        self.chat_id = row.telegram_chat_id
        self.thread_id = row.thread_id
        self.feed = EventFeed(row.chat_id, queue or asyncio.Queue())
        self.interval = settings.TELEGRAM_EDIT_INTERVAL_SECONDS
        self.text = ""
        self.shown = ""
        self.plain_previews = False
        # After a restart we do not know when the message was last edited: wait a full interval.
        self.last_write = time.monotonic() if row.message_ids else 0.0
        self.outcome: TurnOutcome | None = None
        # A turn waiting for a decision writes nothing until a decider presses: no typing.
        self.waiting = False

    async def run(self) -> None:
        """Follow the turn to its end, previewing as text arrives, then send the final parts."""
        if self.row.status == OutboundMessage.Status.PENDING:
            await db(outbox_progress, row=self.row, status=OutboundMessage.Status.SENDING)
        for event in await self.feed.catch_up():
            self._apply(event)
        next_typing = 0.0
        next_check = time.monotonic()
        while self.outcome is None:
            now = time.monotonic()
            if now >= next_typing and not self.waiting:
                await self.sender.typing(chat_id=self.chat_id, thread_id=self.thread_id)
                next_typing = time.monotonic() + settings.TELEGRAM_TYPING_INTERVAL_SECONDS
            if self.text and self._preview_due():
                await self._preview()
            if time.monotonic() >= next_check:
                self.outcome = self.outcome or await db(turn_outcome, turn_id=self.row.turn_id)
                next_check = time.monotonic() + DB_CHECK_SECONDS
                if self.outcome is not None:
                    break
            waits = [next_typing, next_check]
            if self.text != self.shown:
                waits.append(self._next_write_at(time.monotonic()))
            for event in await self.feed.next(min(waits) - time.monotonic()):
                self._apply(event)
        await self._finish(self.outcome)

    # events

    def _apply(self, event: dict) -> None:
        if event.get("turn_id") != self.row.turn_id:
            return
        kind = event.get("type")
        message = event.get("message") or {}
        if kind == "turn.delta":
            self.text += event.get("text", "")
        elif kind in ("turn.waiting", "turn.started"):  # started again once decided
            self.waiting = kind == "turn.waiting"
        elif kind in FINAL_EVENTS:
            self.outcome = TurnOutcome(
                FINAL_EVENTS[kind], message.get("text") or "", event.get("error", ""), ""
            )
        elif kind == "turn.interrupted":
            self.outcome = TurnOutcome(
                "interrupted", message.get("text") or "", "", event.get("reason", "")
            )

    # previews while the model writes

    def _next_write_at(self, now: float) -> float:
        return max(self.last_write + self.interval, now + self.sender.gate.remaining(self.chat_id))

    def _preview_due(self) -> bool:
        now = time.monotonic()
        return self.text != self.shown and now >= self._next_write_at(now)

    async def _preview(self) -> None:
        fmt = _fmt()
        text = self.text
        if "[" in text and has_outbound_draft():
            # As the final text will read (knowledge's citations, say), never a bare mark.
            text = await db(outbound_draft_text, self.row.chat_id, text)
        html = fmt.streaming_preview(text, fmt.TELEGRAM_LIMIT)
        plain = _cut_utf16(text, fmt.TELEGRAM_LIMIT)
        if self.plain_previews:
            html = plain
        try:
            if not self.row.message_ids:
                message_id = await self._send_once(html, plain, self.row.reply_to_message_id)
                await record_sent(self.row, message_ids=[message_id])
            else:
                await self._edit_once(self.row.message_ids[0], html, plain)
        except RetryAfter as exc:
            self.sender.gate.block(self.chat_id, retry_seconds(exc))
            return
        except Forbidden as exc:  # blocked or removed: no later call would get through
            raise Permanent(str(exc)) from exc
        except BadRequest as exc:
            if _is(exc, "parse entities", "unsupported start tag"):
                self.plain_previews = True
            else:
                logger.info("preview of turn %s not shown: %s", self.row.turn_id, exc)
        except NetworkError as exc:
            logger.info("preview of turn %s not shown: %s", self.row.turn_id, exc)
        self.shown = text
        self.last_write = time.monotonic()

    async def _send_once(self, html: str, plain: str, reply_to: int | None) -> int:
        """A preview is sent without retries: the next one carries newer text anyway."""
        reply = (
            ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
            if reply_to
            else None
        )
        message = await self.sender.bot.send_message(
            chat_id=self.chat_id,
            text=html,
            parse_mode=None if html == plain else ParseMode.HTML,
            link_preview_options=link_previews(),
            message_thread_id=self.thread_id,
            reply_parameters=reply,
        )
        return message.message_id

    async def _edit_once(self, message_id: int, html: str, plain: str) -> None:
        try:
            await self.sender.bot.edit_message_text(
                chat_id=self.chat_id,
                message_id=message_id,
                text=html,
                parse_mode=None if html == plain else ParseMode.HTML,
                link_preview_options=link_previews(),
            )
        except BadRequest as exc:
            if not _is(exc, "not modified"):
                raise

    # the final answer

    def _final_markdown(self, outcome: TurnOutcome) -> str:
        reply = outcome.reply_text or self.text
        if outcome.status == "completed":
            return reply or "_(no answer)_"
        if outcome.status == "failed":
            notice = f"⚠️ {outcome.error or 'The agent could not answer.'}"
            return f"{reply}\n\n{notice}" if reply else notice
        if not reply:
            return ""  # stopped before a word: nothing to show (/stop answers for itself)
        if outcome.reason == SUPERSEDED:
            return f"{reply}\n\n_(interrupted by a newer message)_"
        return f"{reply}\n\n_(stopped)_"

    async def _finish(self, outcome: TurnOutcome) -> None:
        fmt = _fmt()
        markdown = self._final_markdown(outcome)
        row = self.row
        if markdown:
            markdown = await db(turn_outbound_text, turn_id=row.turn_id, text=markdown)
        files = await db(turn_reply_files, turn_id=row.turn_id)
        if not markdown and not files:
            await db(reply_row_delivered, row=row, text="", parts=0)
            return
        parts = fmt.split_for_telegram(markdown, fmt.TELEGRAM_LIMIT) if markdown else []
        message_ids = list(row.message_ids)
        for index, part in enumerate(parts):
            if index < row.parts_sent:
                continue
            html, plain = fmt.to_telegram_html(part), fmt.plain_text_fallback(part)
            edited = False
            if index < len(message_ids):
                # The streamed message becomes part one; spacing and flood control still hold.
                await asyncio.sleep(max(0.0, self.last_write + self.interval - time.monotonic()))
                edited = await self.sender.edit(
                    chat_id=self.chat_id, message_id=message_ids[index], html=html, plain=plain
                )
                self.last_write = time.monotonic()
                if not edited:
                    message_ids = message_ids[:index]
            if not edited:
                message_id = await self.sender.send(
                    chat_id=self.chat_id,
                    thread_id=self.thread_id,
                    html=html,
                    plain=plain,
                    reply_to=row.reply_to_message_id if index == 0 else None,
                )
                message_ids.append(message_id)
            await record_sent(row, message_ids=message_ids, parts_sent=index + 1)
        refused = await self._send_files(files, message_ids)
        if refused:
            await db(
                reply_row_failed,
                row=row,
                status=OutboundMessage.Status.FAILED,
                text=markdown,
                error="; ".join(refused)[:2000],
            )
            return
        # Delivered only now that every part has its message id; whoever waits for the
        # receipt (a scheduled run) learns it in the same transaction.
        await db(reply_row_delivered, row=row, text=markdown, parts=len(parts) + len(files))

    async def _send_files(self, files: list[ReplyFile], message_ids: list[int]) -> list[str]:
        """Send each file not sent yet, recording its outcome at once; returns what Telegram
        refused, in words (each also told in the chat)."""
        row = self.row
        done = {entry["key"]: entry for entry in (row.payload or {}).get("files", [])}
        outcomes, refused = [], []
        for file in files:
            entry = done.get(file.key)
            if entry is None:
                entry = {"key": file.key, "name": file.name, "size": file.size}
                try:
                    data = await db(file.read)
                    entry["message_id"] = await self.sender.send_file(
                        chat_id=self.chat_id, thread_id=self.thread_id, file=file, data=data
                    )
                    entry["state"] = "sent"
                    message_ids.append(entry["message_id"])
                except FileRefused as exc:
                    entry.update(state="failed", error=str(exc)[:500])
                    notice = (
                        f"⚠️ Telegram refused the file {file.name} ({exc}). "
                        "It is attached to this reply on the dashboard."
                    )
                    entry["notice_message_id"] = await self.sender.send(
                        chat_id=self.chat_id, thread_id=self.thread_id, html=notice, plain=notice
                    )
                    message_ids.append(entry["notice_message_id"])
            outcomes.append(entry)
            if entry["state"] == "failed":
                refused.append(f"{entry['name']}: {entry.get('error', 'refused')}")
            payload = {**(row.payload or {}), "files": list(outcomes)}
            await record_sent(row, message_ids=list(message_ids), payload=payload)
        return refused
