from html.parser import HTMLParser

import pytest
from django.template import Context, Template
from django.utils.safestring import SafeString

from chats.markdown import ALLOWED_TAGS, MAX_MARKDOWN_CHARS, render_markdown
from chats.templatetags.hub_markdown import markdown_filter

ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "rel", "target"},
    "code": {"class"},
    "ol": {"start"},
    "th": {"align"},
    "td": {"align"},
}
ALLOWED_URL_PREFIXES = ("http://", "https://", "mailto:")

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<IMG SRC=JaVaScRiPt:alert('XSS')>",
    '<a href="javascript:alert(1)">x</a>',
    "<svg/onload=alert(1)>",
    "<iframe src=//evil.example></iframe>",
    "<style>body{display:none}</style>",
    '<div style="position:fixed">x</div>',
    "<!-- comment --><b onclick=x>b</b>",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](java&#x09;script:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html,<script>alert(1)</script>)",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](file:///etc/passwd)",
    "[x](/admin/logout/)",
    "[x](//evil.example/)",
    '[x](https://ok.example "a\\" onmouseover=\\"alert(1)")',
    "![x](https://evil.example/pixel.png)",
    "![x](javascript:alert(1))",
    "<https://ok.example/?q=<script>>",
    "<javascript:alert(1)>",
    "[x]: javascript:alert(1)\n\n[x]",
    '```python" onclick="alert(1)\ncode\n```',
    "```<script>alert(1)</script>\ncode\n```",
    "`<script>alert(1)</script>`",
    "| a | b |\n|---|---|\n| <script>x</script> | [y](javascript:z) |",
    "~~<img src=x onerror=alert(1)>~~",
    "*" * 1000 + "<script>" + "_" * 1000,
    "<<script>script>alert(1)<</script>/script>",
    "\x00<script>\ufeffalert(1)</script>",
    "<math><mi xlink:href=javascript:alert(1)>x</mi></math>",
    "<form action=javascript:alert(1)><input type=submit></form>",
]


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None]):
        self.tag = tag
        self.attrs = attrs


class Collector(HTMLParser):
    """Every element and its attributes, as a browser's tokenizer would see them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append(Element(tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> Collector:
    collector = Collector()
    collector.feed(html)
    collector.close()
    return collector


def elements(html: str, tag: str) -> list[Element]:
    return [element for element in parse(html).elements if element.tag == tag]


def text_of(html: str) -> str:
    return "".join(parse(html).text)


def assert_only_allowed_markup(html: str) -> None:
    for element in parse(html).elements:
        assert element.tag in ALLOWED_TAGS, (element.tag, html)
        unexpected = set(element.attrs) - ALLOWED_ATTRIBUTES.get(element.tag, set())
        assert not unexpected, (element.tag, unexpected, html)
        href = element.attrs.get("href")
        if href is not None:
            assert href.lower().startswith(ALLOWED_URL_PREFIXES), (href, html)
        if element.tag == "code" and "class" in element.attrs:
            assert element.attrs["class"].startswith("language-"), html
            assert " " not in element.attrs["class"], html


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_input_produces_only_allowed_markup(text):
    html = render_markdown(text)

    assert isinstance(html, SafeString)
    assert_only_allowed_markup(html)
    attribute_values = [
        str(value).lower() for element in parse(html).elements for value in element.attrs.values()
    ]
    assert not any("javascript:" in value or "data:" in value for value in attribute_values)


def test_script_tag_is_shown_as_text():
    html = render_markdown("<script>alert(1)</script>")

    assert elements(html, "script") == []
    assert "&lt;script&gt;" in html
    assert text_of(html).strip() == "<script>alert(1)</script>"


def test_img_with_onerror_is_shown_as_text():
    html = render_markdown("<img src=x onerror=alert(1)>")

    assert elements(html, "img") == []
    assert all("onerror" not in element.attrs for element in parse(html).elements)
    assert text_of(html).strip() == "<img src=x onerror=alert(1)>"


@pytest.mark.parametrize(
    "text",
    ["[x](javascript:alert(1))", "[x](data:text/html,<b>hi</b>)", "[x](/relative/path)"],
)
def test_links_outside_http_https_mailto_have_no_href(text):
    html = render_markdown(text)

    assert [link.attrs.get("href") for link in elements(html, "a")] in ([], [None])
    assert 'href="' not in html


def test_links_open_in_a_new_tab_without_referrer_or_ranking():
    text = '[docs](https://example.com/a?b=1&c=2 "Docs") and <mailto:a@example.com>'

    html = render_markdown(text)

    links = elements(html, "a")
    assert [link.attrs["href"] for link in links] == [
        "https://example.com/a?b=1&c=2",
        "mailto:a@example.com",
    ]
    assert links[0].attrs["title"] == "Docs"
    for link in links:
        assert set(link.attrs["rel"].split()) == {"nofollow", "noopener", "noreferrer"}
        assert link.attrs["target"] == "_blank"


def test_image_is_shown_as_a_link_not_loaded():
    html = render_markdown("![diagram](https://example.com/d.png)")

    assert elements(html, "img") == []
    assert [link.attrs["href"] for link in elements(html, "a")] == ["https://example.com/d.png"]


def test_code_fence_keeps_language_and_escapes_content():
    text = "```python\nif a < b and c > \"d\":\n    print('<b>')\n```"

    html = render_markdown(text)

    assert '<pre><code class="language-python">' in html
    assert "a &lt; b" in html
    assert "<b>" not in html
    assert text_of(html).strip("\n") == "if a < b and c > \"d\":\n    print('<b>')"


def test_code_fence_with_hostile_info_string_keeps_no_class():
    html = render_markdown('```"><script>alert(1)</script>\nx\n```')

    assert elements(html, "code")[0].attrs == {}
    assert elements(html, "script") == []


def test_inline_code():
    html = render_markdown("run `rm -rf <dir>` carefully")

    assert "<code>rm -rf &lt;dir&gt;</code>" in html


def test_table_with_alignment_and_no_style_attribute():
    html = render_markdown("| left | mid | right |\n|:--|:-:|--:|\n| 1 | 2 | 3 |")

    assert [cell.attrs.get("align") for cell in elements(html, "th")] == [
        "left",
        "center",
        "right",
    ]
    assert [cell.attrs.get("align") for cell in elements(html, "td")] == [
        "left",
        "center",
        "right",
    ]
    assert "style" not in html
    assert len(elements(html, "table")) == 1


def test_strikethrough():
    assert render_markdown("~~gone~~ kept") == "<p><del>gone</del> kept</p>\n"


def test_single_newlines_become_line_breaks():
    html = render_markdown("first line\nsecond line")

    assert len(elements(html, "br")) == 1
    assert len(elements(html, "p")) == 1


def test_ordered_list_keeps_its_start_number():
    html = render_markdown("3. three\n4. four")

    assert elements(html, "ol")[0].attrs == {"start": "3"}


def test_unclosed_fence_renders_the_rest_as_code():
    html = render_markdown("before\n\n```python\nx = 1 < 2\n\n*not emphasis*")

    assert "<p>before</p>" in html
    code = elements(html, "code")
    assert code[0].attrs == {"class": "language-python"}
    assert "*not emphasis*" in html
    assert elements(html, "em") == []


@pytest.mark.parametrize(
    "text",
    ["**unbalanced *emphasis", "_a *b _c* d_", "[link](", "[[x]](y", "> > > ", "- \n-\n  -"],
)
def test_broken_markdown_renders_something(text):
    html = render_markdown(text)

    assert_only_allowed_markup(html)
    assert html.strip()


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "text",
    [">" * 10_000 + " deep", "[" * 100_000, "- " * 10_000 + "deep", "![" * 50_000, "a\n" * 90_000],
    ids=["blockquotes", "brackets", "lists", "images", "lines"],
)
def test_pathological_input_is_bounded(text):
    # The timeout marker is the hang guard; these take milliseconds (no timing assert here).
    html = render_markdown(text)
    assert_only_allowed_markup(html)
    assert text_of(html).strip()


def test_too_deep_nesting_is_shown_as_plain_text_not_dropped():
    html = render_markdown(">" * 10_000 + " the words")

    assert elements(html, "blockquote") == []
    assert "the words" in text_of(html)
    assert len(elements(html, "pre")) == 1


def test_chinese_text_is_unchanged():
    text = "你好，世界！这是一条测试消息。"

    assert render_markdown(text) == f"<p>{text}</p>\n"
    assert text_of(render_markdown("**加粗** 和 *斜体*")) == "加粗 和 斜体\n"


def test_empty_text_renders_empty():
    assert render_markdown("") == ""


@pytest.mark.timeout(10)
def test_huge_input_is_escaped_plain_text():
    text = ("<script>alert(1)</script> **not bold**\n" * 8_000)[: 300 * 1024]
    assert len(text) > MAX_MARKDOWN_CHARS

    html = render_markdown(text)
    assert elements(html, "script") == []
    assert elements(html, "strong") == []
    assert len(elements(html, "pre")) == 1
    assert "too long" in text_of(html)
    assert text in text_of(html)


def test_template_filter_marks_output_safe_and_escapes_raw_html():
    template = Template("{% load hub_markdown %}<div>{{ text|markdown }}</div>")

    html = template.render(Context({"text": "**hi** <b onclick=x>raw</b>"}))

    assert html == "<div><p><strong>hi</strong> &lt;b onclick=x&gt;raw&lt;/b&gt;</p>\n</div>"
    assert isinstance(markdown_filter("x"), SafeString)
    assert markdown_filter(None) == ""
