"""Agent replies (Markdown) turned into messages the Telegram Bot API accepts.

Telegram's ``parse_mode=HTML`` knows a handful of tags and rejects the whole message for one
unknown or unbalanced tag, so replies are rendered by walking markdown-it-py's tokens and
emitting only those tags; everything else is escaped text. A message holds at most 4096
UTF-16 code units, so long replies are split into parts that fit both as HTML and as the
Markdown source, which is what gets sent without ``parse_mode`` if Telegram still refuses
the HTML. Work is bounded: input too costly to parse is shown as escaped plain text.
"""

import bisect
import functools
import itertools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from markdown_it.token import Token

TELEGRAM_LIMIT = 4096
# Fence lines added at split points take up to ~80 units and a <pre> another ~80, so a
# smaller limit could leave no room for the reply itself.
MIN_LIMIT = 256

ALLOWED_HREF = re.compile(r"(?:https?|tg|mailto):", re.IGNORECASE)
ELLIPSIS = "…"

MAX_NESTING = 32
# markdown-it-py parse cost in microseconds per character, measured on inputs made of one
# character repeated (``[[[[…``, ``![![…``, one list item per line, ``*a*a…``); prose costs
# ~1.4 µs a character, so a message of ordinary Markdown costs a few milliseconds. One made
# of little but brackets or list markers is shown as plain text instead.
_PARSE_COST_US = {"[": 16.0, "\n": 14.0, "!": 6.0, "*": 5.0, "_": 5.0, "~": 4.0, "&": 2.5}
_BASE_COST_US = 1.5
_LIST_ITEM_COST_US = 25.0  # on top of its newline: ``- a`` lines cost ~39 µs each
_LIST_ITEM = re.compile(r"^[ \t>]*(?:[-*+]|[0-9]{1,9}[.)])[ \t]", re.MULTILINE)
MAX_PARSE_COST_US = 30_000.0

_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,40}")
_BULLET = "•"
_INDENT = "  "
_RULE = "———"

_FENCE_OPEN = re.compile(
    r"(?P<lead>[ \t>]{0,12}(?:(?:[-*+]|[0-9]{1,9}[.)])[ \t]+)?)"
    r"(?P<marker>`{3,12}|~{3,12})(?P<info>[^\n]{0,80})"
)
_FENCE_CLOSE = re.compile(r"[ \t>]{0,16}(?P<marker>`{3,}|~{3,})[ \t]*")
_BLANK_LINES = re.compile(r"(?:[ \t]*\n)+")
_NON_SPACE = re.compile(r"\S")
_TAG = re.compile(r"<[^<>]*>")
_KNOWN_TAG = re.compile(r"</?(?:b|i|s|a|code|pre|blockquote)(?: [^<>]*)?>")
_ESCAPED_UNITS = {"&": 5, "<": 4, ">": 4}
_EMPTY_STYLE = re.compile(r"<(b|i|s)></\1>")
_BAD_ENTITY = re.compile(r"&(?!(?:amp|lt|gt|quot|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});)")


def utf16_len(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units, so a character outside the BMP is 2."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def to_telegram_html(markdown: str) -> str:
    """Markdown to HTML made only of tags Telegram accepts, balanced and escaped; never raises."""
    text = _clean(markdown)
    if not text.strip():
        return ""
    try:
        html = _render(text)
    except Exception:
        # markdown-it-py accepts any string and the renderer only emits what it opened;
        # this is the last line of defence, so one odd reply still reaches the chat.
        html = None
    if html is None or not _is_telegram_html(html):
        return _escape(text)
    if not _TAG.sub("", html).strip():
        # Telegram refuses a message with no visible text (a lone link definition, say).
        return _escape(text)
    return html


def split_for_telegram(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Markdown parts, in order and losing no text, each within ``limit`` as HTML and as source."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} UTF-16 code units")
    text = _normalise_newlines(markdown or "")
    return [part for part, _complete in _iter_parts(text, limit)]


def plain_text_fallback(markdown_part: str) -> str:
    """The part's Markdown source to send without parse_mode; same length, so it still fits."""
    return _clean(markdown_part)


def streaming_preview(markdown: str, limit: int = TELEGRAM_LIMIT) -> str:
    """HTML of the start of a reply that may still be streaming, within ``limit``; "…" if cut."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} UTF-16 code units")
    text = _normalise_newlines(markdown or "")
    if utf16_len(text) <= limit:
        html = to_telegram_html(text)
        if utf16_len(html) <= limit:
            return html
    # Only the first part is shown, so only the text it can reach is laid out: previews of
    # a long reply cost the same as those of a short one.
    head = _head(text, limit)
    for part, complete in _iter_parts(head, limit - utf16_len(ELLIPSIS)):
        html = to_telegram_html(part)
        everything = complete and not _NON_SPACE.search(text, len(head))
        return html if everything else html + ELLIPSIS
    return ""


def _head(text: str, limit: int) -> str:
    """The start of ``text`` holding every place a first part within ``limit`` could end."""
    first = _NON_SPACE.search(text)
    reach = (first.start() if first else 0) + limit + 1
    line_end = text.find("\n", reach)
    if line_end < 0:
        return text[: reach + 1]
    # And the start of the next line: whether a split may come before it depends on its
    # kind, and fence lines are short.
    return text[: line_end + 257]


# Rendering ---------------------------------------------------------------------------------


def _clean(text: str) -> str:
    text = "" if text is None else str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be sent as UTF-8; a valid pair becomes its character, as
        # UTF-16 would read it, and a lone half becomes U+FFFD (same length in UTF-16).
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\0", "\ufffd")


def _normalise_newlines(text: str) -> str:
    return str(text).replace("\r\n", "\n").replace("\r", "\n")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_attribute(text: str) -> str:
    return _escape(text).replace('"', "&quot;")


def _parse_cost_us(text: str) -> float:
    cost = len(text) * _BASE_COST_US
    if cost > MAX_PARSE_COST_US:
        return cost
    # Inside fenced code markdown-it-py only looks for the closing fence, so brackets in a
    # JSON dump cost nothing there.
    markup = "\n".join(line for line, kind, _fence in _line_kinds(text) if kind != "code")
    for char, char_cost in _PARSE_COST_US.items():
        cost += markup.count(char) * char_cost
    return cost + len(_LIST_ITEM.findall(markup)) * _LIST_ITEM_COST_US


@functools.cache
def _parser() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "breaks": True, "linkify": False, "maxNesting": MAX_NESTING},
    )
    md.enable(["table", "strikethrough"])
    return md


def _render(text: str) -> str | None:
    if _parse_cost_us(text) > MAX_PARSE_COST_US:
        return None
    tokens = _parser().parse(text)
    # markdown-it-py silently drops blocks nested deeper than maxNesting; show the text.
    if any(token.nesting == 1 and token.level >= MAX_NESTING - 1 for token in tokens):
        return None
    return _HtmlWriter().render(tokens)


@dataclass
class _ListState:
    ordered: bool
    tight: bool
    number: int


@dataclass
class _HtmlWriter:
    out: list[str] = field(default_factory=list)
    lists: list[_ListState] = field(default_factory=list)
    quote_depth: int = 0
    quote_open: bool = False
    separator: str = ""
    marker: str | None = None

    def render(self, tokens: list[Token]) -> str:
        index = 0
        while index < len(tokens):
            index = self._block(tokens, index)
        if self.quote_open:
            self.out.append("</blockquote>")
        html = "".join(self.out)
        # Closing styles around inline code can leave empty pairs such as <b></b>.
        while True:
            shorter = _EMPTY_STYLE.sub("", html)
            if shorter == html:
                return html.strip()
            html = shorter

    def _block(self, tokens: list[Token], index: int) -> int:
        token = tokens[index]
        kind = token.type
        if kind in ("paragraph_open", "heading_open"):
            self._begin()
            inline = tokens[index + 1] if index + 1 < len(tokens) else None
            children = inline.children if inline is not None and inline.children else []
            if kind == "heading_open":
                self.out.append("<b>")
                _InlineWriter(self.out, self._continuation(), ["b"]).render(children)
                self.out.append("</b>")
            else:
                _InlineWriter(self.out, self._continuation(), []).render(children)
            self._end()
            return _skip_to_close(tokens, index)
        if kind in ("fence", "code_block"):
            self._code(token.content, token.info if kind == "fence" else "")
        elif kind == "hr":
            self._begin()
            self.out.append(_RULE)
            self._end()
        elif kind == "table_open":
            end = _skip_to_close(tokens, index)
            self._pre(_table_text(tokens[index:end]), language=None)
            return end
        elif kind in ("bullet_list_open", "ordered_list_open"):
            start = str(token.attrGet("start") or 1)
            self.lists.append(
                _ListState(
                    ordered=kind == "ordered_list_open",
                    tight=_is_tight(tokens, index),
                    number=int(start) if start.isdigit() else 1,
                )
            )
        elif kind in ("bullet_list_close", "ordered_list_close"):
            if self.lists:
                self.lists.pop()
            self.marker = None
            self._end()
        elif kind == "list_item_open" and self.lists:
            state = self.lists[-1]
            label = f"{state.number}." if state.ordered else _BULLET
            state.number += 1
            self.marker = _INDENT * (len(self.lists) - 1) + label + " "
        elif kind == "list_item_close":
            self.marker = None
        elif kind == "blockquote_open":
            self.quote_depth += 1
        elif kind == "blockquote_close":
            self.quote_depth = max(0, self.quote_depth - 1)
            if self.quote_depth == 0 and self.quote_open:
                self.out.append("</blockquote>")
                self.quote_open = False
                self._end()
        return index + 1

    def _begin(self, *, pre: bool = False) -> None:
        if self.quote_depth and not self.quote_open:
            # Telegram does not nest blockquotes: every level shares the outermost tag.
            self.out.append(self.separator)
            self.out.append("<blockquote>")
            self.quote_open = True
            self.separator = ""
        self.out.append(self.separator)
        self.separator = ""
        if self.marker is not None:
            self.out.append(self.marker)
            self.marker = None
        elif self.lists and not pre:
            self.out.append(self._continuation())

    def _end(self) -> None:
        self.separator = "\n" if self.lists and self.lists[-1].tight else "\n\n"

    def _continuation(self) -> str:
        return _INDENT * len(self.lists)

    def _code(self, content: str, info: str) -> None:
        content = content.rstrip("\n")
        if not content.strip():
            return
        words = info.split()
        language = words[0] if words and _LANGUAGE.fullmatch(words[0]) else None
        self._pre(content, language=language)

    def _pre(self, content: str, *, language: str | None) -> None:
        self._begin(pre=True)
        if language:
            self.out.append(f'<pre><code class="language-{language}">')
            self.out.append(_escape(content))
            self.out.append("</code></pre>")
        else:
            self.out.append(f"<pre>{_escape(content)}</pre>")
        self._end()


class _InlineWriter:
    """Inline tokens to HTML; ``outer`` are formatting tags the caller already opened."""

    def __init__(self, out: list[str], newline_indent: str, outer: list[str]):
        self.out = out
        self.newline = "\n" + newline_indent
        self.formatting = list(outer)  # open b/i/s tags, outermost first, including outer
        self.stack: list[str | None] = []  # what each open token emitted, to close it
        self.in_link = False

    def render(self, children: list[Token]) -> None:
        for position, token in enumerate(children):
            self._token(token, children[position + 1] if position + 1 < len(children) else None)
        while len(self.stack) > 0:
            self._close()

    def _token(self, token: Token, following: Token | None) -> None:
        kind = token.type
        if kind == "text":
            self.out.append(_escape(token.content))
        elif kind in ("softbreak", "hardbreak"):
            self.out.append(self.newline)
        elif kind in ("strong_open", "em_open", "s_open"):
            tag = {"strong_open": "b", "em_open": "i", "s_open": "s"}[kind]
            # Telegram rejects the same style nested in itself (``***x***`` in a heading).
            if tag in self.formatting:
                self.stack.append(None)
            else:
                self.out.append(f"<{tag}>")
                self.formatting.append(tag)
                self.stack.append(tag)
        elif kind in ("strong_close", "em_close", "s_close", "link_close"):
            self._close()
        elif kind == "link_open":
            href = str(token.attrGet("href") or "")
            if self.in_link or not ALLOWED_HREF.match(href):
                self.stack.append(None)
            else:
                self.out.append(f'<a href="{_escape_attribute(href)}">')
                self.in_link = True
                self.stack.append("a")
                if following is None or following.type == "link_close":
                    self.out.append(_escape(href))
        elif kind == "code_inline":
            self._code(token.content)
        elif kind == "image":
            self._image(token)
        elif token.content:
            self.out.append(_escape(token.content))

    def _close(self) -> None:
        if not self.stack:
            return
        tag = self.stack.pop()
        if tag is None:
            return
        self.out.append(f"</{tag}>")
        if tag == "a":
            self.in_link = False
        elif tag in self.formatting:
            self.formatting.remove(tag)

    def _code(self, content: str) -> None:
        if self.in_link:
            # Telegram lets no entity contain a link and code at once; keep the link.
            self.out.append(_escape(content))
            return
        # Code may not sit inside bold/italic/strike, so those close around it and reopen.
        for tag in reversed(self.formatting):
            self.out.append(f"</{tag}>")
        self.out.append(f"<code>{_escape(content)}</code>")
        for tag in self.formatting:
            self.out.append(f"<{tag}>")

    def _image(self, token: Token) -> None:
        src = str(token.attrGet("src") or "")
        alt = _plain_text(token.children or []) or token.content
        if self.in_link or not ALLOWED_HREF.match(src):
            self.out.append(_escape(alt))
            return
        self.out.append(f'<a href="{_escape_attribute(src)}">{_escape(alt or src)}</a>')


def _skip_to_close(tokens: list[Token], index: int) -> int:
    """Index just past the token closing ``tokens[index]``."""
    depth = 0
    for position in range(index, len(tokens)):
        depth += tokens[position].nesting
        if depth <= 0:
            return position + 1
    return len(tokens)


def _is_tight(tokens: list[Token], index: int) -> bool:
    level = tokens[index].level
    for token in tokens[index + 1 :]:
        if token.level == level and token.nesting == -1:
            return True
        if token.type == "paragraph_open" and token.level == level + 2:
            return token.hidden
    return True


def _plain_text(children: list[Token]) -> str:
    parts = []
    for token in children:
        if token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif token.type == "image":
            parts.append(_plain_text(token.children or []) or token.content)
        elif token.type in ("text", "code_inline", "html_inline", "text_special"):
            parts.append(token.content)
    return "".join(parts)


def _table_text(tokens: list[Token]) -> str:
    """A table laid out in monospace, since Telegram has no table entity."""
    rows: list[list[str]] = []
    aligns: list[str] = []
    header_rows = 0
    for token in tokens:
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "thead_close":
            header_rows = len(rows)
        elif token.type in ("th_open", "td_open") and rows:
            style = str(token.attrGet("style") or "")
            if len(rows) == 1:
                aligns.append(style.removeprefix("text-align:"))
        elif token.type == "inline" and rows:
            rows[-1].append(_plain_text(token.children or []).strip())
    columns = max((len(row) for row in rows), default=0)
    widths = [
        max((_display_width(row[c]) for row in rows if c < len(row)), default=0)
        for c in range(columns)
    ]
    lines = []
    for number, row in enumerate(rows):
        cells = []
        for column in range(columns):
            cell = row[column] if column < len(row) else ""
            pad = " " * (widths[column] - _display_width(cell))
            align = aligns[column] if column < len(aligns) else ""
            cells.append(pad + cell if align == "right" else cell + pad)
        lines.append(" | ".join(cells).rstrip())
        if number + 1 == header_rows:
            lines.append("-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def _display_width(text: str) -> int:
    width = 0
    for char in text:
        if unicodedata.combining(char) or char in "\u200d\ufe0e\ufe0f":
            continue
        width += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return width


class _TelegramHtmlChecker(HTMLParser):
    """Telegram's nesting rules: no entity inside code/pre, code and pre inside no style or
    link, no link in a link, blockquote only at the top."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.valid = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = [name for name, _value in attrs]
        parent = self.stack[-1] if self.stack else None
        inside = set(self.stack)
        if parent in ("code", "pre") and not (tag == "code" and parent == "pre"):
            self.valid = False
        elif tag in ("b", "i", "s"):
            self.valid &= not attrs and tag not in inside
        elif tag == "a":
            self.valid &= names == ["href"] and "a" not in inside
        elif tag == "code":
            if parent == "pre":
                self.valid &= names in ([], ["class"])
            else:
                self.valid &= not attrs and not inside & {"b", "i", "s", "a"}
        elif tag == "pre":
            self.valid &= not attrs and inside <= {"blockquote"}
        elif tag == "blockquote":
            self.valid &= not attrs and not inside
        else:
            self.valid = False
        self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.valid = False

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        else:
            self.valid = False

    def handle_comment(self, data: str) -> None:
        self.valid = False

    def handle_decl(self, decl: str) -> None:
        self.valid = False

    def handle_pi(self, data: str) -> None:
        self.valid = False

    def unknown_decl(self, data: str) -> None:
        self.valid = False


def _is_telegram_html(html: str) -> bool:
    """Second check of the renderer's output, so a renderer bug costs formatting, not a reply."""
    if _BAD_ENTITY.search(html) or re.search(r"[<>]", _KNOWN_TAG.sub("", html)):
        return False
    checker = _TelegramHtmlChecker()
    checker.feed(html)
    checker.close()
    return checker.valid and not checker.stack


# Splitting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fence:
    reopen: str
    close: str


@dataclass(frozen=True)
class _Cut:
    end: int  # the part takes text[start:end]
    resume: int  # the next part starts here; what lies between is whitespace


class _Layout:
    """Lines of a reply with their fenced-code state and the places it may be split."""

    def __init__(self, text: str):
        self.text = text
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.kinds: list[str] = []  # text, blank, open, code, close
        self.fences: list[_Fence | None] = []
        self.units = list(itertools.accumulate((1 + (c > "\uffff") for c in text), initial=0))
        # What each character costs once escaped as HTML, so the first guess at a part
        # already leaves room for &amp; and &lt;; markup is then measured by rendering.
        self.escaped_units = list(
            itertools.accumulate(
                (_ESCAPED_UNITS.get(c, 1 + (c > "\uffff")) for c in text), initial=0
            )
        )
        self._scan()
        self.paragraph_cuts = self._paragraph_cuts()
        self.line_cuts = self._line_cuts()
        self.max_close_units = max(
            (utf16_len(fence.close) + 1 for fence in self.fences if fence), default=0
        )

    def _scan(self) -> None:
        position = 0
        for line, kind, fence in _line_kinds(self.text):
            self.starts.append(position)
            self.ends.append(position + len(line))
            self.kinds.append(kind)
            self.fences.append(fence)
            position += len(line) + 1

    def _paragraph_cuts(self) -> list[_Cut]:
        cuts = []
        for line in range(1, len(self.kinds)):
            if self.kinds[line] == "blank" and self.kinds[line - 1] != "blank":
                after = line
                while after < len(self.kinds) and self.kinds[after] == "blank":
                    after += 1
                resume = self.starts[after] if after < len(self.kinds) else len(self.text)
                cuts.append(_Cut(self.ends[line - 1], resume))
        cuts.append(_Cut(len(self.text.rstrip()), len(self.text)))
        return cuts

    def _line_cuts(self) -> list[_Cut]:
        cuts = []
        for line in range(len(self.kinds) - 1):
            kind, following = self.kinds[line], self.kinds[line + 1]
            # Never right after an opening fence or right before a closing one: that part
            # would carry an empty code block.
            if kind in ("text", "close") or (kind == "code" and following == "code"):
                cuts.append(_Cut(self.ends[line], self.starts[line + 1]))
        return cuts

    def line_of(self, position: int) -> int:
        return bisect.bisect_right(self.starts, position) - 1

    def fence_at(self, position: int) -> _Fence | None:
        """The fence left open by a part ending at ``position``."""
        line = self.line_of(position)
        kind = self.kinds[line]
        if kind == "code" or (kind == "open" and position > self.starts[line]):
            return self.fences[line]
        return None

    def index_within(self, start: int, units: int) -> int:
        """Largest end such that text[start:end] is at most ``units`` long, raw and escaped."""
        raw = bisect.bisect_right(self.units, self.units[start] + units) - 1
        escaped = bisect.bisect_right(self.escaped_units, self.escaped_units[start] + units) - 1
        return max(start + 1, min(raw, escaped))

    def choose(self, start: int, limit_end: int) -> _Cut:
        """Where to end a part starting at ``start`` and ending by ``limit_end``."""
        halfway = start + (limit_end - start) // 2
        fallback = None
        for found in (
            _latest(self.paragraph_cuts, start, limit_end, self.text),
            _latest(self.line_cuts, start, limit_end, self.text),
            self._space_cut(start, limit_end),
        ):
            if found is not None and found.end >= halfway:
                return found
            fallback = fallback or found
        return fallback or self._anywhere_cut(start, limit_end)

    def _space_cut(self, start: int, limit_end: int) -> _Cut | None:
        search_end = limit_end
        for _attempt in range(64):
            space = self.text.rfind(" ", start + 1, search_end)
            if space < 0:
                return None
            run_start = space
            while run_start > start and self.text[run_start - 1] == " ":
                run_start -= 1
            run_end = space + 1
            while run_end < len(self.text) and self.text[run_end] == " ":
                run_end += 1
            line = self.line_of(space)
            line_start, line_end = self.starts[line], self.ends[line]
            inner = line_start < run_start and run_end < line_end and run_start > start
            if inner and self.kinds[line] == "text":
                return _Cut(run_start, run_end)
            # Spaces inside code are content: they stay, the code line just wraps.
            if inner and self.kinds[line] == "code" and run_end <= limit_end:
                return _Cut(run_end, run_end)
            search_end = run_start
        return None

    def _anywhere_cut(self, start: int, limit_end: int) -> _Cut:
        line = self.line_of(limit_end)
        if self.kinds[line] in ("open", "close") and self.starts[line] - 1 > start:
            return _Cut(self.starts[line] - 1, self.starts[line])
        for end in range(limit_end, max(start, limit_end - 64), -1):
            if _is_cluster_boundary(self.text, end):
                return _Cut(end, end)
        return _Cut(limit_end, limit_end)


def _fence_opening(line: str) -> tuple[_Fence, str, int] | None:
    match = _FENCE_OPEN.fullmatch(line)
    if match is None:
        return None
    marker, info = match["marker"], match["info"]
    if info.startswith(marker[0]) or (marker[0] == "`" and "`" in info):
        return None
    lead = match["lead"]
    # Reopened fences start a part of their own, outside any list, so they may not be
    # indented four spaces (that would be an indented code block showing the fence).
    lead = "> " * lead.count(">") if ">" in lead else " " * min(len(lead.expandtabs(4)), 3)
    words = info.split()
    language = words[0][:40] if words else ""
    return _Fence(reopen=lead + marker + language, close=lead + marker), marker[0], len(marker)


def _line_kinds(text: str) -> Iterator[tuple[str, str, _Fence | None]]:
    """Each line with its kind (text, blank, open, code, close) and the fence it belongs to."""
    current: tuple[_Fence, str, int] | None = None
    for line in text.split("\n"):
        if current is None:
            current = _fence_opening(line)
            if current is not None:
                yield line, "open", current[0]
            else:
                yield line, "text" if line.strip() else "blank", None
            continue
        closing = _FENCE_CLOSE.fullmatch(line)
        marker = closing["marker"] if closing else ""
        if marker[:1] == current[1] and len(marker) >= current[2]:
            yield line, "close", current[0]
            current = None
        else:
            yield line, "code", current[0]


def _latest(cuts: list[_Cut], start: int, limit_end: int, text: str) -> _Cut | None:
    index = bisect.bisect_right(cuts, limit_end, key=lambda cut: cut.end) - 1
    if index < 0 or cuts[index].end <= start:
        return None
    cut = cuts[index]
    return cut if _NON_SPACE.search(text, start, cut.end) else None


def _is_cluster_boundary(text: str, position: int) -> bool:
    """Whether splitting here keeps user-perceived characters whole (approximately)."""
    if position <= 0 or position >= len(text):
        return True
    before, after = text[position - 1], text[position]
    if "\ud800" <= before <= "\udbff" and "\udc00" <= after <= "\udfff":
        return False
    if before == "\u200d" or after in "\u200d\ufe0e\ufe0f\u20e3":
        return False
    if unicodedata.category(after) in ("Mn", "Mc", "Me"):
        return False
    if "\U0001f3fb" <= after <= "\U0001f3ff" or "\U000e0020" <= after <= "\U000e007f":
        return False
    if _is_regional(before) and _is_regional(after):
        run = 0
        while position - run - 1 >= 0 and _is_regional(text[position - run - 1]):
            run += 1
        return run % 2 == 0
    return True


def _is_regional(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


def _iter_parts(text: str, limit: int) -> Iterator[tuple[str, bool]]:
    """Parts of ``text`` within ``limit``, each with whether it is the last one."""
    if not _NON_SPACE.search(text):
        return
    layout = _Layout(text)
    position = _skip_blank_lines(text, 0)
    carried: _Fence | None = None
    while True:
        prefix = carried.reopen + "\n" if carried else ""
        budget = limit - utf16_len(prefix) - layout.max_close_units
        limit_end = layout.index_within(position, budget)
        visible = _NON_SPACE.search(text, position)
        if visible is not None and visible.start() >= limit_end:
            # A run of whitespace longer than a message: drop it, it is a split point.
            position = visible.start()
            limit_end = layout.index_within(position, budget)
        for attempt in itertools.count():
            cut = layout.choose(position, limit_end)
            fence = layout.fence_at(cut.end)
            part = prefix + text[position : cut.end].rstrip()
            if fence is not None:
                part += "\n" + fence.close
            html_units = utf16_len(to_telegram_html(part))
            if (html_units <= limit and utf16_len(part) <= limit) or cut.end - position <= 1:
                break
            size = cut.end - position
            longest = max(html_units, utf16_len(part))
            # Shrink in proportion to the excess first; halve if that does not converge
            # (the HTML of a shorter prefix is not always shorter).
            shrunk = int(size * 0.99 * limit / longest) if attempt < 6 else size // 2
            limit_end = position + max(1, min(shrunk, size - 1))
        position = cut.resume
        if fence is None:
            position = _skip_blank_lines(text, position)
        complete = not _NON_SPACE.search(text, position)
        yield part, complete
        if complete:
            return
        carried = fence


def _skip_blank_lines(text: str, position: int) -> int:
    match = _BLANK_LINES.match(text, position)
    return match.end() if match else position
