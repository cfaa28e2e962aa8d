"""Plain text (CSV, Markdown, source code, logs …) and HTML to text with the standard
library. Runs in the extraction child."""

from html.parser import HTMLParser

from attachments.extraction.pages import Extracted, PageSink, flowing_extracted

# Elements whose content is never text a person reads on the page.
_HIDDEN = frozenset({"script", "style", "template", "head", "svg", "math", "iframe", "object"})
# Blocks stand apart (a line break before and after); lines only start a new line.
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "div", "dl", "fieldset", "figcaption",
        "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr",
        "main", "nav", "ol", "p", "pre", "section", "table", "ul",
    }
)  # fmt: skip
_LINES = frozenset({"br", "dd", "dt", "li", "tr"})


class _TextOf(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self._in_title = True
        elif tag in _HIDDEN:
            self.hidden += 1
        elif tag in _BLOCKS or tag in _LINES:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append("\t")
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6") and not self.hidden:
            self.parts.append("#" * int(tag[1]) + " ")
        elif tag == "li" and not self.hidden:
            self.parts.append("- ")

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        elif not self.hidden:
            self.parts.append(data)


def html_text(source: str) -> str:
    """The readable text of an HTML page: no scripts, styles or markup; blocks on their own
    lines, headings marked with #, the title first."""
    parser = _TextOf()
    parser.feed(source)
    parser.close()
    lines = []
    for line in "".join(parser.parts).splitlines():
        line = " ".join(line.split())
        if line or (lines and lines[-1]):
            lines.append(line)
    body = "\n".join(lines).strip()
    title = " ".join(parser.title.split())
    return f"{title}\n\n{body}" if title and not body.startswith(f"# {title}") else body


def _decode(path: str, limit: int | None = None) -> str:
    with open(path, "rb") as file:
        data = file.read(limit) if limit is not None else file.read()
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: str, sink: PageSink) -> Extracted:
    # A character is at most 4 bytes in UTF-8: bytes past that many can never be stored.
    return flowing_extracted(_decode(path, sink.max_chars * 4 + 4), sink)


def read_html(path: str, sink: PageSink) -> Extracted:
    return flowing_extracted(html_text(_decode(path)), sink)
