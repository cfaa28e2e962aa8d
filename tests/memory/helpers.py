"""Helpers shared by the memory tests."""

from memory.models import MemoryEntry


def shown_revision(entry_id: int) -> int:
    """The revision a reviewer looking at the entry right now would be shown."""
    return MemoryEntry.objects.get(pk=entry_id).revision
