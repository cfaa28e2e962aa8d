"""The history rows of recently active chats, kept in the worker process between turns.

The context builder reads the same few hundred rows before every model request, and only
the newest one or two are new since the last turn. A chat's entry holds every stored row
(all roles) with an id in (`lo`, `hi`], newest first, as `StoredMessage`s already parsed.
Before each build one statement checks the entry against the database:

- the chat's history version and the actors' (`chats.HistoryVersion`, which database
  triggers change on any edit or deletion of one of its messages and on any rename, whoever
  writes: another worker, `.update()`, raw SQL);
- how many rows the chat holds in (`lo`, `hi`]: a row committed late into that range (on
  PostgreSQL ids are handed out before commit) makes the count differ.

The versions are read before any row, so an entry can only be older than the versions it
carries, never newer: a change that lands while it is filled makes the next check fail.
Anything that differs drops the entry, and the rows are read again. Rows newer than `hi`
(the new messages) are read with one query and put in front; older rows are read in
batches when a build needs them (a compression moved the start, a larger window).

Never used inside a transaction (`connection.in_atomic_block`): a row it has written may
still be rolled back, and its id handed out again (committed ids never are: AUTOINCREMENT on
SQLite, sequences on PostgreSQL). A chat without a version row (the row is made with the
chat; a table emptied by hand) is not cached. Bounded: MAX_CHATS entries of at most MAX_ROWS
rows each and MAX_TOTAL_ROWS together, least recently used first out.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable

from django.db import connection

from chats.agent.convert import StoredMessage
from chats.models import Actor, HistoryVersion, Message

MAX_CHATS = 32
MAX_ROWS = 4000  # per chat; a 128k window needs ~600
MAX_TOTAL_ROWS = 12_000  # all chats together: ~1 KB a row held (text, parsed row, item), ~12 MB
MAX_NEW = 512  # more new rows than this since the last build: read the chat afresh


class Entry:
    """A chat's rows with lo < id <= hi, newest first; `versions` as read before them."""

    __slots__ = ("versions", "lo", "hi", "rows")

    def __init__(self, versions: tuple, lo: int, hi: int, rows: list[StoredMessage]):
        self.versions, self.lo, self.hi, self.rows = versions, lo, hi, rows


class RowCache:
    """Per-process entries by chat id. One build uses an entry at a time: `take` removes
    it, `put` gives it back (two threads building for one chat: the second reads afresh)."""

    def __init__(self):
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0  # for tests and the bench

    def take(self, chat_id: int) -> Entry | None:
        with self._lock:
            return self._entries.pop(chat_id, None)

    def put(self, chat_id: int, entry: Entry) -> None:
        if len(entry.rows) > MAX_ROWS:  # keep the newest; everything above the new lo stays
            del entry.rows[MAX_ROWS:]
            entry.lo = entry.rows[-1].id - 1  # every row from the oldest kept one up is held
        with self._lock:
            self._entries[chat_id] = entry
            self._entries.move_to_end(chat_id)
            total = sum(len(held.rows) for held in self._entries.values())
            while len(self._entries) > MAX_CHATS or (
                total > MAX_TOTAL_ROWS and len(self._entries) > 1
            ):
                _, dropped = self._entries.popitem(last=False)
                total -= len(dropped.rows)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


cache = RowCache()


# --- SQL ---------------------------------------------------------------------------------

_SQL: dict[tuple[str, str], str] = {}


def _sql(name: str) -> str:
    key = (connection.vendor, name)
    sql = _SQL.get(key)
    if sql is None:
        sql = _SQL[key] = _BUILDERS[name](connection.ops.quote_name)
    return sql


def _check_sql(quote) -> str:
    """The chat's version, the actors' version and the count of rows in (lo, hi]."""
    version = quote(HistoryVersion._meta.db_table)
    scope = quote(HistoryVersion._meta.get_field("scope").column)
    value = quote(HistoryVersion._meta.get_field("version").column)
    table = quote(Message._meta.db_table)
    chat = quote(Message._meta.get_field("chat").column)
    pk = quote(Message._meta.pk.column)
    return (
        f"SELECT (SELECT {value} FROM {version} WHERE {scope} = %s), "
        f"(SELECT {value} FROM {version} WHERE {scope} = 0), "
        f"(SELECT COUNT(*) FROM {table} WHERE {chat} = %s AND {pk} > %s AND {pk} <= %s)"
    )


def _rows_sql(quote) -> str:
    """Every row of the chat with lo < id <= hi, newest first, at most %s of them."""
    table = quote(Message._meta.db_table)

    def column(name: str) -> str:
        return f"{table}.{quote(Message._meta.get_field(name).column)}"

    actor = quote(Actor._meta.db_table)
    pk = f"{table}.{quote(Message._meta.pk.column)}"
    return (
        f"SELECT {pk}, {column('role')}, {column('text')}, CAST({column('parts')} AS text), "
        f"CAST({column('metadata')} AS text), {column('token_count')}, "
        f"{actor}.{quote(Actor._meta.get_field('display_name').column)} "
        f"FROM {table} LEFT OUTER JOIN {actor} "
        f"ON ({column('actor')} = {actor}.{quote(Actor._meta.pk.column)}) "
        f"WHERE {column('chat')} = %s AND {pk} > %s AND {pk} <= %s "
        f"ORDER BY {pk} DESC LIMIT %s"
    )


_BUILDERS = {"check": _check_sql, "rows": _rows_sql}

_NO_ID = 2**62  # above any id


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


class Rows:
    """The rows of one chat above `start_id`, newest first, for one build: from the cache,
    with the older ones read on demand (`batch`). `convert` turns a fetched tuple into a
    StoredMessage (the scan's own parsing)."""

    def __init__(
        self,
        chat_id: int,
        start_id: int,
        convert: Callable[[tuple], StoredMessage],
        rows_cache: RowCache | None = None,
    ):
        self.cache = rows_cache or cache
        self.chat_id, self.start_id, self.convert = chat_id, start_id, convert
        entry = self.cache.take(chat_id)
        lo, hi = (entry.lo, entry.hi) if entry is not None else (0, 0)
        chat_version, actor_version, count = _fetch(_sql("check"), [chat_id, chat_id, lo, hi])[0]
        versions = (chat_version, actor_version)
        if entry is not None and (entry.versions != versions or count != len(entry.rows)):
            entry = None
        self.cacheable = chat_version is not None
        if entry is None:
            self.cache.misses += 1
            newest = self._read(start_id, _NO_ID, self.FIRST)
            lo = start_id if len(newest) < self.FIRST else newest[-1].id - 1
            hi = newest[0].id if newest else start_id
            entry = Entry(versions, lo, hi, newest)
        else:
            self.cache.hits += 1
            new = self._read(entry.hi, _NO_ID, MAX_NEW + 1)
            if len(new) > MAX_NEW:  # long away: start again from the newest (a full read)
                entry = Entry(versions, new[-1].id - 1, new[0].id, new)
            elif new:
                entry.rows[:0] = new
                entry.hi = new[0].id
            if start_id > entry.lo:  # a compression moved the start: forget what it covers
                keep = len(entry.rows)
                while keep and entry.rows[keep - 1].id <= start_id:
                    keep -= 1
                del entry.rows[keep:]
                entry.lo, entry.hi = start_id, max(entry.hi, start_id)
        self.entry = entry

    FIRST = 256

    def _read(self, lo: int, hi: int, limit: int) -> list[StoredMessage]:
        convert = self.convert
        return [convert(row) for row in _fetch(_sql("rows"), [self.chat_id, lo, hi, limit])]

    def more(self, size: int) -> bool:
        """Read up to `size` rows older than the entry holds (above start_id); False when
        there are none."""
        entry = self.entry
        if entry.lo <= self.start_id:
            return False
        older = self._read(self.start_id, entry.lo, size)
        entry.rows += older
        entry.lo = self.start_id if len(older) < size else older[-1].id - 1
        return bool(older)

    def done(self) -> None:
        """The build is over: give the entry back (only where it can be trusted)."""
        if self.cacheable and not connection.in_atomic_block:
            self.cache.put(self.chat_id, self.entry)
