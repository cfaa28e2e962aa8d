"""The search syntax: one parser for the search page, `GET /api/v1/search` and `session_search`.

    deploy 部署           every word, anywhere in a message (case-insensitive substrings)
    "exact phrase"        the words together, exactly as written
    deploy OR release     either side (binds tighter than the implicit AND)
    -draft   NOT draft    messages without it
    dep*                  words starting with "dep" (in Chinese, 记忆* is 记忆)
    from:olivia           the author's display name contains it, or is their username
    in:"team room"        the chat's title contains it, or is its chat key
    channel:telegram      chats of that channel
    after:2026-01-31      stored on a later day; before:2026-02-01 on an earlier day
    has:file  type:pdf    filters other apps register (`register_search_filter`): here
                          attachments' (messages with a file; with a file of that type)

Anything else is literal text: `%`, `_`, `(`, `a"b` (a quote inside a word) and lowercase
`or` are searched for. A query the grammar cannot read raises `SearchQueryError`, whose
message says what was wrong and how to write it, for the person or the model to read.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.utils import timezone

MAX_TERMS = 8
MAX_FILTER_VALUES = 8
FILTERS = ("from", "in", "channel", "before", "after")
_FILTER = re.compile(r"([a-z]+):(.*)", re.DOTALL)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SEPARATORS = str.maketrans({"\x00": " "})


class SearchQueryError(ValueError):
    """A query the syntax cannot read; str(error) is a sentence for whoever wrote it."""


@dataclass(frozen=True)
class RegisteredFilter:
    """A filter another app adds to the syntax: `check(value)` returns the value as the
    condition will use it (raising SearchQueryError for one it cannot take); `condition(values)`
    returns `(sql, params)`, a condition on the message row `m` that any one of the values
    satisfies (the same filter twice: either value, as for from:, in: and channel:)."""

    name: str
    example: str
    check: Callable[[str], str]
    condition: Callable[[list[str]], tuple[str, list]]


_registered: dict[str, RegisteredFilter] = {}


def register_search_filter(
    name: str,
    *,
    example: str,
    check: Callable[[str], str],
    condition: Callable[[list[str]], tuple[str, list]],
) -> None:
    """Add `name:` to the syntax (idempotent by name; the built-in filters cannot be taken)."""
    if name in FILTERS or not re.fullmatch(r"[a-z]+", name):
        raise ValueError(f"cannot register the search filter {name!r}")
    _registered[name] = RegisteredFilter(name, example, check, condition)


def registered_filter(name: str) -> RegisteredFilter:
    return _registered[name]


def _filter_names() -> tuple[str, ...]:
    return FILTERS + tuple(_registered)


@dataclass(frozen=True)
class Term:
    """One thing to look for: a substring (a word or a phrase) or a word prefix."""

    text: str
    prefix: bool = False


@dataclass
class SearchQuery:
    """`clauses` must all match (each is a list of alternatives), `excluded` must not;
    filters narrow by author, chat, channel and storage time (`after` <= t < `before`)."""

    clauses: list[list[Term]] = field(default_factory=list)
    excluded: list[Term] = field(default_factory=list)
    authors: list[str] = field(default_factory=list)
    chats: list[str] = field(default_factory=list)
    channels: list[str] = field(default_factory=list)
    after: datetime | None = None
    before: datetime | None = None
    # Registered filters' values by name (has:file, type:pdf …), checked by their filter.
    extra: dict[str, list[str]] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not (self.clauses or self.excluded or self.has_filters)

    @property
    def has_filters(self) -> bool:
        return bool(
            self.authors or self.chats or self.channels or self.after or self.before or self.extra
        )

    @property
    def highlight_terms(self) -> list[str]:
        """The texts to mark in snippets: every positive term."""
        return [term.text for clause in self.clauses for term in clause]


def _clean(query: str) -> str:
    # NUL and lone surrogates cannot be sent to the database: treat them as separators.
    query = query.translate(_SEPARATORS)
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in query):
        query = "".join(" " if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in query)
    return query


def _tokens(query: str) -> list[tuple[str, str, bool]]:
    """(head, text, quoted) pieces: a `"` opening a piece runs to the next `"`, and `-"x"`
    and `name:"x"` keep their head (`-`, `name:`). A quote inside a word is a character."""
    tokens: list[tuple[str, str, bool]] = []
    i, n = 0, len(query)
    while i < n:
        if query[i].isspace():
            i += 1
            continue
        start = i
        head = ""
        if query[i] == "-" and i + 1 < n and query[i + 1] == '"':
            head, i = "-", i + 1
        else:
            match = _FILTER.match(query, i)
            if match and query.startswith('"', match.start(2)):
                head, i = match.group(1) + ":", match.start(2)
        if query[i] == '"':
            end = query.find('"', i + 1)
            if end == -1:
                raise SearchQueryError(
                    f"The quote opened at “{query[start : start + 20]}” is never closed; "
                    'close it ("exact phrase") or leave quotes out.'
                )
            phrase = query[i + 1 : end]
            if not phrase.strip():
                raise SearchQueryError('An empty phrase ("") finds nothing; put words inside.')
            tokens.append((head, phrase, True))
            i = end + 1
            continue
        while i < n and not query[i].isspace():
            i += 1
        tokens.append(("", query[start:i], False))
    return tokens


def _term(text: str, quoted: bool) -> Term:
    if quoted or not text.endswith("*"):
        return Term(text)
    stem = text.rstrip("*")
    if not stem:
        raise SearchQueryError("`*` needs the start of a word before it, as in deploy*.")
    first = stem[0]
    # Word starts mean something in scripts with spaces; 记忆* is simply 记忆.
    if first.isascii() or first.lower() != first.upper():
        return Term(stem, prefix=True)
    return Term(stem)


def _day(name: str, value: str) -> date:
    if not _DATE.fullmatch(value):
        raise SearchQueryError(
            f"{name}: takes a date as YYYY-MM-DD (like 2026-01-31), not “{value}”."
        )
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise SearchQueryError(f"{name}:{value} is not a real date.") from None


def _start_of(name: str, value: str, *, days_later: int = 0) -> datetime:
    """The start of the day `value` (plus `days_later`) in the current time zone. Days at
    the ends of the calendar (after:9999-12-31, or before:0001-01-01 east of UTC) have no
    such moment in UTC, where the database stores times: refused here, not a 500 later."""
    try:
        day = _day(name, value) + timedelta(days=days_later)
        moment = timezone.make_aware(
            datetime.combine(day, time.min), timezone.get_current_timezone()
        )
        moment.astimezone(UTC)
    except OverflowError:
        raise SearchQueryError(f"{name}:{value} is out of range; use a nearer day.") from None
    return moment


def _add_filter(parsed: SearchQuery, name: str, value: str) -> None:
    value = value.strip()
    if not value:
        example = _EXAMPLES[name] if name in _EXAMPLES else _registered[name].example
        raise SearchQueryError(f"{name}: needs a value, as in {name}:{example}.")
    if name in _registered:
        values = parsed.extra.setdefault(name, [])
        if len(values) == MAX_FILTER_VALUES:
            raise SearchQueryError(f"At most {MAX_FILTER_VALUES} {name}: filters.")
        values.append(_registered[name].check(value))
        return
    if name == "before":
        parsed.before = min(filter(None, [parsed.before, _start_of(name, value)]))
    elif name == "after":
        moment = _start_of(name, value, days_later=1)
        parsed.after = max(filter(None, [parsed.after, moment]))
    else:
        values = {"from": parsed.authors, "in": parsed.chats, "channel": parsed.channels}[name]
        if len(values) == MAX_FILTER_VALUES:
            raise SearchQueryError(f"At most {MAX_FILTER_VALUES} {name}: filters.")
        values.append(value.casefold() if name == "channel" else value)


_EXAMPLES = {
    "from": "olivia",
    "in": '"team room"',
    "channel": "telegram",
    "before": "2026-01-31",
    "after": "2026-01-31",
}


def parse_search_query(query: str) -> SearchQuery:
    """The query's terms and filters; raises SearchQueryError for what it cannot read."""
    parsed = SearchQuery()
    pending_or = False
    negate_next = False
    seen: set[tuple[str, bool, bool]] = set()
    count = 0
    for head, text, quoted in _tokens(_clean(query)):
        if not quoted and text in ("OR", "NOT"):
            if negate_next:
                raise SearchQueryError(f"NOT must be followed by a word, not {text}.")
            if text == "NOT":
                negate_next = True
                continue
            if not parsed.clauses or pending_or:
                raise SearchQueryError("OR needs a word on each side, as in deploy OR release.")
            pending_or = True
            continue
        negative = negate_next or head == "-"
        negate_next = False
        filter_name = head[:-1] if head.endswith(":") else None
        if not quoted and not negative:
            if text == "-":
                raise SearchQueryError("A lone - excludes nothing; write -word (no space).")
            if text.startswith("-"):
                negative, text = True, text[1:]
            elif match := _FILTER.fullmatch(text):
                name, value = match.groups()
                if name in _filter_names():
                    filter_name, text = name, value
                elif value:
                    raise SearchQueryError(
                        f"Unknown filter {name}:. The filters are "
                        + ", ".join(f"{known}:" for known in _filter_names())
                        + f'; to search for the text, quote it: "{text}".'
                    )
        if filter_name is not None:
            if filter_name not in _filter_names():
                raise SearchQueryError(
                    f"Unknown filter {filter_name}:. The filters are "
                    + ", ".join(f"{known}:" for known in _filter_names())
                    + "."
                )
            if pending_or or negative:
                raise SearchQueryError(f"{filter_name}: cannot follow OR or NOT.")
            _add_filter(parsed, filter_name, text)
            continue
        term = _term(text, quoted)
        key = (term.text.casefold(), term.prefix, negative)
        if key in seen and not pending_or:
            continue
        seen.add(key)
        count += 1
        if count > MAX_TERMS:
            raise SearchQueryError(f"At most {MAX_TERMS} words or phrases per search.")
        if negative:
            if pending_or:
                raise SearchQueryError("OR joins words to find; put the excluded word apart.")
            parsed.excluded.append(term)
        elif pending_or:
            parsed.clauses[-1].append(term)
            pending_or = False
        else:
            parsed.clauses.append([term])
    if pending_or:
        raise SearchQueryError("OR needs a word on each side, as in deploy OR release.")
    if negate_next:
        raise SearchQueryError("NOT needs a word after it, as in NOT draft.")
    if parsed.excluded and not parsed.clauses and not parsed.has_filters:
        raise SearchQueryError(
            "A search cannot only exclude: add a word to find, as in deploy -draft."
        )
    if parsed.after and parsed.before and parsed.after >= parsed.before:
        raise SearchQueryError("after: must be a day before before: (both days excluded).")
    return parsed
