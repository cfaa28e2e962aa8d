"""`manage.py export_memory <dir>`: approved memory as Hermes Agent style files, per book."""

import hashlib
import re
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chats.keys import escape_part
from memory.models import MemoryBook, MemoryEntry, Scope

# Hermes Agent keeps one entry per paragraph, separated by a line holding only `§`.
ENTRY_SEPARATOR = "\n§\n"
PENDING_PREFIX = "[pending] "
MAX_NAME_CHARS = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]|^\.")


def safe_name(key: str) -> str:
    """A file name for `key` that stays one path component: every character outside
    `A-Za-z0-9_.-` (and a leading dot) is %-encoded, so distinct keys get distinct names;
    overlong names are cut and end in a hash of the whole key."""
    name = _UNSAFE.sub(
        lambda match: "".join(f"%{byte:02X}" for byte in match.group().encode()), key
    )
    if not name:
        name = "%00"
    if len(name) > MAX_NAME_CHARS:
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        name = f"{name[: MAX_NAME_CHARS - 17]}~{digest}"
    return name


def book_path(book: MemoryBook) -> Path:
    """Where a book goes, relative to the export directory."""
    if book.scope == Scope.TEAM:
        return Path("MEMORY.md")
    if book.scope == Scope.CHAT:
        return Path("chats") / safe_name(book.chat.chat_key) / "MEMORY.md"
    if book.person_id is not None:
        owner = book.person.get_username()
    else:  # an actor not linked to a person yet; the colon keeps it apart from usernames
        actor = book.actor
        # Two integrations' user "u1" are two actors (namespaces): two files, never one.
        parts = [actor.namespace, actor.external_id] if actor.namespace else [actor.external_id]
        owner = ":".join([actor.channel, *map(escape_part, parts)])
    return Path("users") / safe_name(owner) / "USER.md"


def render_book(entries: list[MemoryEntry]) -> str:
    """The file's text: entries in the order they were made, `§` between them."""
    texts = [
        (PENDING_PREFIX if entry.status == MemoryEntry.Status.PENDING else "") + entry.text
        for entry in entries
    ]
    return ENTRY_SEPARATOR.join(texts) + "\n"


class Command(BaseCommand):
    help = (
        "Write approved memory as MEMORY.md (team, one per chat under chats/) and USER.md "
        "(one per person under users/) files, entries separated by a line with §."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory", help="where to write; created if missing")
        parser.add_argument(
            "--include-pending",
            action="store_true",
            help=f"also write proposed additions, marked {PENDING_PREFIX.strip()!r}",
        )

    def handle(self, *args, directory: str, include_pending: bool, **options):
        """Writes one file per book holding approved entries (plus pending additions with
        --include-pending), only inside `directory`; books with nothing to write are skipped."""
        root = Path(directory).resolve()
        if root.exists() and not root.is_dir():
            raise CommandError(f"{root} exists and is not a directory")
        statuses = [MemoryEntry.Status.ACTIVE]
        if include_pending:
            statuses.append(MemoryEntry.Status.PENDING)
        entries_by_book: dict[int, list[MemoryEntry]] = {}
        for entry in MemoryEntry.objects.filter(status__in=statuses).order_by("created_at", "id"):
            entries_by_book.setdefault(entry.book_id, []).append(entry)
        books = MemoryBook.objects.filter(pk__in=list(entries_by_book)).select_related(
            "chat", "person", "actor"
        )
        files = total = 0
        for book in sorted(books, key=lambda book: str(book_path(book))):
            target = (root / book_path(book)).resolve()
            if not target.is_relative_to(root):  # cannot happen with safe_name; never write out
                raise CommandError(f"refusing to write outside {root}: {target}")
            entries = entries_by_book[book.pk]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(render_book(entries), encoding="utf-8")
            files += 1
            total += len(entries)
            self.stdout.write(f"{target.relative_to(root)}: {len(entries)} entries ({book})")
        self.stdout.write(
            self.style.SUCCESS(f"Wrote {files} file(s) with {total} entries to {root}")
        )
