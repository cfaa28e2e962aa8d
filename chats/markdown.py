"""Chat messages (untrusted Markdown from people and from the model) rendered to safe HTML.

Two layers, so that a bug in one is caught by the other: markdown-it-py never emits raw
HTML from the input (``html=False``), and nh3 (Ammonia) then keeps only an explicit
allow-list of tags, attributes and URL schemes. Work is bounded: inputs that are too long,
too dense in markup or too deeply nested are shown as escaped plain text instead.
"""

import functools
import re

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore

MAX_MARKDOWN_CHARS = 200_000
# markdown-it-py drops block content nested deeper than this; such a message is shown as
# plain text instead, so nothing the author wrote silently disappears.
MAX_NESTING = 20
# Rough markdown-it-py parse cost in microseconds per character, measured on pathological
# inputs (``[[[[…``, ``*a*a…``, a list item or table row per line, ``<<<…``); plain prose
# costs ~0.2 µs a character. Lines and delimiters make parsing slow, not length as such.
_PARSE_COST_US = {
    "\n": 80.0,
    "[": 40.0,
    "*": 25.0,
    "_": 25.0,
    "~": 15.0,
    "`": 10.0,
    "!": 5.0,
    "<": 3.0,
    "&": 6.0,
    "]": 3.0,
    ":": 3.0,
    "\\": 3.0,
    "|": 2.0,
}
_PLAIN_COST_US = 0.2
MAX_PARSE_COST_US = 500_000.0

ALLOWED_TAGS = frozenset(
    {
        "p",
        "br",
        "strong",
        "em",
        "del",
        "code",
        "pre",
        "blockquote",
        "ul",
        "ol",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "a",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "hr",
    }
)
ALLOWED_URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "nofollow noopener noreferrer"

_LANGUAGE_CLASS = re.compile(r"language-[A-Za-z0-9_+#.-]{1,40}")
_LIST_START = re.compile(r"[0-9]{1,9}")
_TEXT_ALIGN = re.compile(r"text-align:(left|center|right)")


def render_markdown(text: str) -> SafeString:
    """Render untrusted Markdown to sanitised HTML; never raises on any input, bounded work."""
    text = text or ""
    if len(text) > MAX_MARKDOWN_CHARS:
        return _plain_text(text, note="This message is too long to format; shown as plain text.")
    if _parse_cost_us(text) > MAX_PARSE_COST_US:
        return _plain_text(text, note="This message has too much markup; shown as plain text.")
    md = _markdown_parser()
    try:
        tokens = md.parse(text)
    except Exception:
        # markdown-it-py is meant to accept any string; this is the last line of defence.
        return _plain_text(text, note="This message could not be formatted; shown as plain text.")
    if any(token.nesting == 1 and token.level >= MAX_NESTING - 1 for token in tokens):
        return _plain_text(text, note="This message is nested too deeply; shown as plain text.")
    html = md.renderer.render(tokens, md.options, {})
    return mark_safe(_sanitizer().clean(html))  # nh3 made it safe


def _parse_cost_us(text: str) -> float:
    cost = len(text) * _PLAIN_COST_US
    for char, char_cost in _PARSE_COST_US.items():
        cost += text.count(char) * char_cost
    return cost


def _plain_text(text: str, *, note: str) -> SafeString:
    return mark_safe(f"<p><em>{escape(note)}</em></p><pre>{escape(text)}</pre>")


@functools.cache
def _markdown_parser() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "breaks": True, "linkify": False, "maxNesting": MAX_NESTING},
    )
    md.enable(["table", "strikethrough"])
    # Images would load third-party URLs from the dashboard; `![alt](url)` shows as a link.
    md.disable("image")
    md.core.ruler.push("hub_tags", _adjust_tags)
    return md


def _adjust_tags(state: StateCore) -> None:
    """Strikethrough as ``<del>``; cell alignment as ``align="x"`` instead of a style attribute."""
    for token in state.tokens:
        if token.type in ("th_open", "td_open") and "style" in token.attrs:
            match = _TEXT_ALIGN.fullmatch(str(token.attrs.pop("style")))
            if match:
                token.attrs["align"] = match.group(1)
        elif token.type == "inline" and token.children:
            for child in token.children:
                if child.type in ("s_open", "s_close"):
                    child.tag = "del"


@functools.cache
def _sanitizer() -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=set(ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={"a": {"href", "title"}, "code": {"class"}, "ol": {"start"}},
        tag_attribute_values={
            "th": {"align": {"left", "center", "right"}},
            "td": {"align": {"left", "center", "right"}},
        },
        attribute_filter=_filter_attribute,
        set_tag_attribute_values={"a": {"target": "_blank"}},
        link_rel=LINK_REL,
        url_schemes=set(ALLOWED_URL_SCHEMES),
        url_relative="deny",
        strip_comments=True,
    )


def _filter_attribute(tag: str, attribute: str, value: str) -> str | None:
    if tag == "code" and attribute == "class":
        return value if _LANGUAGE_CLASS.fullmatch(value) else None
    if tag == "ol" and attribute == "start":
        return value if _LIST_START.fullmatch(value) else None
    return value
