"""Documents into passages along their structure: Markdown headings (ATX `#` and underlined
titles), pages (form feeds from the extraction), paragraphs; English and Chinese alike.

A passage never crosses a heading or a page; paragraphs of one section are packed together
up to `max_tokens` (cl100k tokens: Chinese has no spaces, so sizes are never counted in
words); a paragraph longer than that is cut at sentence ends (`.`, `。`, `！`, `？`, …), and
a sentence longer still at a token boundary. Pure functions: no Django, no database.
"""

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from chats.agent.tokens import count_tokens, decode, encode

MAX_TOKENS = 300
MAX_HEADING_CHARS = 200
SECTION_SEPARATOR = " › "

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_LISTING = re.compile(r"^(-{4,}|\.{4,})[ \t]*$")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；])")
# CJK ideographs, kana, hangul, fullwidth forms: scripts written without spaces.
_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]+"
)


@dataclass(frozen=True)
class Piece:
    """One passage as split: its ordinal, heading path, 1-based page (or None) and text."""

    ordinal: int
    section: str
    page: int | None
    text: str
    token_count: int


@dataclass
class _Block:
    headings: tuple[str, ...]
    page: int | None
    paragraphs: list[str]


def _setext_title(line: str, underline: str) -> bool:
    """Is `line` a title underlined by `underline` (Markdown setext, AsciiDoc/RST titles)? Not
    an indented line or one starting with punctuation (the last line of a code listing
    before its `----` delimiter), and the underline about as long as the title."""
    title, rule = line.rstrip(), underline.strip()
    if not title or title[0].isspace() or not title[0].isalnum():
        return False
    if len(title) > MAX_HEADING_CHARS:
        return False
    return abs(len(rule) - len(title)) <= max(3, len(title) // 3)


# An AsciiDoc anchor written after a title ("OPTIONS[[OPTIONS]]", "Usage [[usage]]"): an id
# for links, not words of the heading a reader sees in a citation.
_TITLE_ANCHOR = re.compile(r"\s*\[\[[^\[\]]*\]\]\s*$")


def _clean_heading(text: str) -> str:
    text = _TITLE_ANCHOR.sub("", text)
    text = re.sub(r"[*_`]+", "", text).strip()
    return text[:MAX_HEADING_CHARS]


def _blocks(page_text: str, page: int | None, headings: list[str]) -> Iterator[_Block]:
    """The blocks of one page: each a run of paragraphs under one heading path. `headings`
    carries the path across pages (a page break is not a new section)."""
    block = _Block(tuple(headings), page, [])
    paragraph: list[str] = []
    fenced = False
    lines = page_text.split("\n")

    def end_paragraph() -> None:
        text = "\n".join(paragraph).strip()
        if text:
            block.paragraphs.append(text)
        paragraph.clear()

    listing = ""  # the AsciiDoc delimiter ("-----") of the listing block we are in
    underline = False  # the next line underlines the title just taken
    for index, line in enumerate(lines):
        if underline:
            underline = False
            continue
        if _FENCE.match(line) and not listing:
            fenced = not fenced
            paragraph.append(line)
            continue
        if not listing and not fenced and line.strip() == "+":
            end_paragraph()  # an AsciiDoc list continuation: a paragraph break here
            continue
        if listing:
            paragraph.append(line)
            if line.strip() == listing:
                listing = ""
            continue
        if (
            not fenced
            and not paragraph
            and _LISTING.match(line)
            and line.strip() in (other.strip() for other in lines[index + 1 :])
        ):
            # An AsciiDoc listing block: a delimiter after a blank line that recurs later
            # (a Markdown rule of 4+ dashes without a twin stays a rule).
            listing = line.strip()
            paragraph.append(line)
            continue
        heading: tuple[int, str] | None = None
        if not fenced:
            atx = _ATX.match(line)
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if atx:
                heading = (len(atx.group(1)), atx.group(2))
            elif not paragraph and _SETEXT.match(following) and _setext_title(line, following):
                heading = (1 if following.strip()[0] == "=" else 2, line.strip())
                underline = True
        if heading is None:
            if line.strip():
                paragraph.append(line.rstrip())
            else:
                end_paragraph()
            continue
        end_paragraph()
        if block.paragraphs:
            yield block
        level, title = heading
        del headings[level - 1 :]
        while len(headings) < level - 1:
            headings.append("")
        headings.append(_clean_heading(title))
        block = _Block(tuple(headings), page, [])
    end_paragraph()
    if block.paragraphs:
        yield block


def _cut_long(text: str, max_tokens: int, counter: Callable[[str], int]) -> list[str]:
    """A paragraph too long for one passage: whole sentences packed, a sentence too long cut
    at a token boundary."""
    sentences = [s for s in _SENTENCE_END.split(text) if s and s.strip()]
    out: list[str] = []
    current: list[str] = []
    used = 0
    for sentence in sentences:
        cost = counter(sentence)
        if cost > max_tokens:
            if current:
                out.append(" ".join(current))
                current, used = [], 0
            tokens = encode(sentence)
            for start in range(0, len(tokens), max_tokens):
                out.append(decode(tokens[start : start + max_tokens]).strip())
            continue
        if current and used + cost > max_tokens:
            out.append(_join_sentences(current))
            current, used = [], 0
        current.append(sentence.strip())
        used += cost + 1
    if current:
        out.append(_join_sentences(current))
    return [piece for piece in out if piece]


def _join_sentences(sentences: list[str]) -> str:
    text = sentences[0]
    for sentence in sentences[1:]:
        # Chinese sentences join without a space.
        text += sentence if _CJK.match(sentence[:1] or " ") else " " + sentence
    return text


def section_label(headings: tuple[str, ...]) -> str:
    return SECTION_SEPARATOR.join(h for h in headings if h)


def split_document(
    text: str,
    *,
    paged: bool = False,
    max_tokens: int = MAX_TOKENS,
    counter: Callable[[str], int] = count_tokens,
) -> list[Piece]:
    """The passages of a document's text. With `paged`, form feeds separate real pages (a
    PDF's, a slide deck's) and each passage records its page; otherwise they are line ends."""
    pages = text.split("\f") if paged else [text.replace("\f", "\n")]
    headings: list[str] = []
    blocks: list[_Block] = []
    for number, page_text in enumerate(pages, start=1):
        blocks.extend(_blocks(page_text, number if paged else None, headings))
    pieces: list[Piece] = []

    def emit(block: _Block, paragraphs: list[str], tokens: int) -> None:
        body = "\n\n".join(paragraphs)
        pieces.append(Piece(len(pieces), section_label(block.headings), block.page, body, tokens))

    for block in blocks:
        current: list[str] = []
        used = 0
        for paragraph in block.paragraphs:
            cost = counter(paragraph)
            parts = [(paragraph, cost)]
            if cost > max_tokens:
                parts = [
                    (part, counter(part)) for part in _cut_long(paragraph, max_tokens, counter)
                ]
            for part, part_cost in parts:
                if current and used + part_cost > max_tokens:
                    emit(block, current, used)
                    current, used = [], 0
                current.append(part)
                used += part_cost
        if current:
            emit(block, current, used)
    return pieces


def has_cjk(text: str) -> bool:
    """Whether the text holds a character of a script written without spaces (CJK)."""
    return _CJK.search(text) is not None


def search_form(text: str) -> str:
    """The text as the full-text index reads it (documents and queries alike): runs of CJK
    characters become overlapping character bigrams ("磁盘已满" -> "磁盘 盘已 已满"), a lone
    character stays itself, so both SQLite's unicode61 tokenizer and PostgreSQL's parser
    find Chinese words without a dictionary."""

    def bigrams(match: re.Match) -> str:
        run = match.group(0)
        if len(run) == 1:
            return f" {run} "
        return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "

    return _CJK.sub(bigrams, text)
