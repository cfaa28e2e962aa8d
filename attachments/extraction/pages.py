"""The page format of extracted text (see the package's docstring) and the bounded sink that
collects pages in the child: extraction stops as soon as the stored text would pass its cap.
No Django here: the child imports it."""

from collections.abc import Iterator
from dataclasses import dataclass, field

PAGE_BREAK = "\f"
PAGE_CHARS = 4000


class Unreadable(Exception):
    """A file the reader cannot read: `str(exc)` is the reason shown to people."""


def unreadable_unless_memory(exc: Exception, reason: str) -> Exception:
    """The exception to raise for a library's failure on a file: MemoryError when memory ran
    out (lxml reports it as a syntax error, "Memory allocation failed"), else Unreadable."""
    if isinstance(exc, MemoryError) or "memory allocation failed" in str(exc).lower():
        return MemoryError()
    return Unreadable(reason)


@dataclass
class Extracted:
    """What one reader got from a file: its pages joined by PAGE_BREAK, how many pages the
    document has (may be more than were read), and notes for people and the model."""

    text: str
    page_count: int
    notes: list[str] = field(default_factory=list)


class PageSink:
    """Pages as they are read, at most `max_chars` characters in all (separators counted);
    `full` turns true once a page had to be cut, and the reader should stop."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.pages: list[str] = []
        self.size = 0
        self.full = False

    def add(self, text: str) -> bool:
        """Add one page; False once the cap is reached (this page cut or left out)."""
        if self.full:
            return False
        text = text.replace(PAGE_BREAK, "\n")
        room = self.max_chars - self.size - (1 if self.pages else 0)
        if len(text) > room:
            self.full = True
            if room <= 0:
                return False
            text = text[:room]
        self.size += len(text) + (1 if self.pages else 0)
        self.pages.append(text)
        return not self.full

    def text(self) -> str:
        return PAGE_BREAK.join(self.pages)


def flowing_pages(text: str, page_chars: int = PAGE_CHARS) -> Iterator[str]:
    """`text` cut into pages of at most `page_chars` characters, at a line end where one is
    in the second half of the page, else at a space, else anywhere."""
    start, length = 0, len(text)
    while start < length:
        end = start + page_chars
        if end >= length:
            yield text[start:].rstrip("\n")
            return
        cut = text.rfind("\n", start + page_chars // 2, end)
        if cut == -1:
            cut = text.rfind(" ", start + page_chars // 2, end)
        if cut == -1:
            cut = end - 1
        yield text[start : cut + 1].rstrip("\n")
        start = cut + 1


def cut_notes(sink: PageSink) -> list[str]:
    return [f"The text was cut at {sink.max_chars:,} characters."] if sink.full else []


def flowing_extracted(text: str, sink: PageSink) -> Extracted:
    """Flowing text paged into `sink`; the page count is of the pages stored."""
    pages = 0
    for page in flowing_pages(text):
        pages += 1
        if not sink.add(page):
            break
    return Extracted(sink.text(), pages, cut_notes(sink))


def page_ranges(numbers: list[int]) -> str:
    """[3, 4, 5, 7] -> "3–5, 7" (an en dash inside a range)."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)
