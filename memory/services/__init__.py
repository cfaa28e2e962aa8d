"""Every write to memory: proposals from the agent, decisions by people, expiry, moves.

Each status change happens under a row lock on the book (or the entry), with its audit event
written in the same transaction. Nothing is stored before the scanner passed it, and a book
never holds more than its budget of live text (approved entries plus pending additions), even
when two writes race.

Callers import from here; the code lives in three modules:

- `books`: statuses, errors, a scope's book and budget, Author and Outcome, the audit event;
- `proposals`: `memory_propose`, the agent's add / replace / remove;
- `housekeeping`: `memory_forget`, `memory_expire_proposals`, `memory_adopt_actor_book`.

People's decisions on proposals are `memory.reviews`.
"""

from memory.services.books import (
    LIVE,
    MAX_AUDIT_TEXT,
    STALE_MESSAGE,
    Author,
    Change,
    Kind,
    Outcome,
    ReviewConflict,
    ReviewInvalid,
    ReviewNotAllowed,
    ReviewStale,
    Status,
    Usage,
    book_usage,
    entry_cost,
    memory_book,
    normalise_text,
)
from memory.services.housekeeping import (
    EXPIRE_BATCH,
    memory_adopt_actor_book,
    memory_expire_proposals,
    memory_forget,
)
from memory.services.proposals import book_text_after, memory_propose, scan_book_after

__all__ = [
    "EXPIRE_BATCH",
    "LIVE",
    "MAX_AUDIT_TEXT",
    "STALE_MESSAGE",
    "Author",
    "Change",
    "Kind",
    "Outcome",
    "ReviewConflict",
    "ReviewInvalid",
    "ReviewNotAllowed",
    "ReviewStale",
    "Status",
    "Usage",
    "book_text_after",
    "book_usage",
    "entry_cost",
    "memory_adopt_actor_book",
    "memory_book",
    "memory_expire_proposals",
    "memory_forget",
    "memory_propose",
    "normalise_text",
    "scan_book_after",
]
