"""Agent replies as Telegram messages: only tags Telegram accepts, and parts that fit."""

import html
import random
import re
from html.parser import HTMLParser

import pytest

from bots.telegram_format import (
    TELEGRAM_LIMIT,
    plain_text_fallback,
    split_for_telegram,
    streaming_preview,
    to_telegram_html,
    utf16_len,
)

STYLES = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del"}
TELEGRAM_TAGS = STYLES | {"code", "pre", "a", "blockquote"}
TELEGRAM_ENTITIES = {"lt", "gt", "amp", "quot"}


class TelegramHtmlChecker(HTMLParser):
    """Telegram's HTML rules as its Bot API documents them, collected as a list of problems."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = [name for name, _value in attrs]
        inside = set(self.stack)
        if tag not in TELEGRAM_TAGS:
            self.problems.append(f"tag <{tag}>")
        if tag == "a" and (names != ["href"] or "a" in inside):
            self.problems.append(f"link {attrs} inside {self.stack}")
        if tag == "code" and attrs:
            language = dict(attrs).get("class") or ""
            if self.stack[-1:] != ["pre"] or not re.fullmatch(r"language-[\w+#.-]+", language):
                self.problems.append(f"code {attrs} inside {self.stack}")
        if tag not in ("a", "code") and attrs:
            self.problems.append(f"<{tag}> with {attrs}")
        if inside & {"code", "pre"} and not (tag == "code" and self.stack[-1:] == ["pre"]):
            self.problems.append(f"<{tag}> inside {self.stack}")
        if tag in ("code", "pre") and inside & (STYLES | {"a"}):
            self.problems.append(f"<{tag}> inside {self.stack}")
        if tag == "blockquote" and self.stack:
            self.problems.append(f"blockquote inside {self.stack}")
        if tag in STYLES and tag in inside:
            self.problems.append(f"<{tag}> inside itself")
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack}")
        else:
            self.stack.pop()

    def handle_startendtag(self, tag, attrs):
        self.problems.append(f"self-closing <{tag}/>")

    def handle_data(self, data):
        if set(data) & set("<>&"):
            self.problems.append(f"unescaped text {data!r}")

    def handle_entityref(self, name):
        if name not in TELEGRAM_ENTITIES:
            self.problems.append(f"entity &{name};")

    def handle_comment(self, data):
        self.problems.append("comment")

    def handle_decl(self, decl):
        self.problems.append("declaration")

    def handle_pi(self, data):
        self.problems.append("processing instruction")

    def unknown_decl(self, data):
        self.problems.append("declaration")


def assert_telegram_html(markup: str) -> None:
    checker = TelegramHtmlChecker()
    checker.feed(markup)
    checker.close()
    assert not checker.problems, (checker.problems, markup)
    assert not checker.stack, ("unclosed", checker.stack, markup)
    assert not re.search("[\ud800-\udfff]", markup), "lone surrogate"


def visible_text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]*>", "", markup))


def fence_lines(markdown: str) -> list[str]:
    return [line for line in markdown.split("\n") if line.lstrip(" >").startswith("```")]


def without_fences_and_space(markdown: str) -> str:
    kept = [line for line in markdown.split("\n") if not line.lstrip(" >").startswith("```")]
    return re.sub(r"\s+", "", "\n".join(kept))


def code_lines(markdown: str) -> list[str]:
    lines, inside = [], False
    for line in markdown.split("\n"):
        if line.startswith("```"):
            inside = not inside
        elif inside:
            lines.append(line)
    return lines


def assert_split(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """The promises of split_for_telegram, checked on one reply."""
    parts = split_for_telegram(markdown, limit)
    for part in parts:
        assert part.strip()
        assert utf16_len(part) <= limit
        assert utf16_len(plain_text_fallback(part)) <= limit
        rendered = to_telegram_html(part)
        assert utf16_len(rendered) <= limit, (utf16_len(rendered), part[:80])
        assert_telegram_html(rendered)
        assert len(fence_lines(part)) % 2 == 0, part
    joined = "\n".join(parts)
    assert without_fences_and_space(joined) == without_fences_and_space(markdown)
    return parts


# Measuring ----------------------------------------------------------------------------------


def test_utf16_len_counts_characters_outside_the_bmp_twice():
    assert utf16_len("") == 0
    assert utf16_len("abc") == 3
    assert utf16_len("中文") == 2
    assert utf16_len("😀") == 2
    assert utf16_len("a😀👨‍👩‍👧") == 1 + 2 + 8
    assert utf16_len("\ud800") == 1


# Rendering ----------------------------------------------------------------------------------


def test_escaping_round_trips_as_text():
    rendered = to_telegram_html("a < b && c > d")
    assert rendered == "a &lt; b &amp;&amp; c &gt; d"
    assert visible_text(rendered) == "a < b && c > d"


def test_entities_in_the_source_are_shown_as_the_characters_they_name():
    rendered = to_telegram_html("&amp; &lt;b&gt; &copy; &#x1F600; &bogus;")
    assert_telegram_html(rendered)
    assert visible_text(rendered) == "& <b> © 😀 &bogus;"


def test_raw_html_is_shown_as_text():
    rendered = to_telegram_html('<script>alert(1)</script> <b onclick="x">hi</b>')
    assert "<script" not in rendered and "<b " not in rendered
    assert visible_text(rendered) == '<script>alert(1)</script> <b onclick="x">hi</b>'


def test_http_links_are_kept_and_javascript_links_are_dropped():
    rendered = to_telegram_html(
        "[site](https://example.com/a?b=1&c=2) and [x](javascript:alert(1))"
    )
    assert '<a href="https://example.com/a?b=1&amp;c=2">site</a>' in rendered
    assert "javascript" not in "".join(re.findall(r'href="[^"]*"', rendered))
    assert rendered.count("<a ") == 1
    assert_telegram_html(rendered)


@pytest.mark.parametrize(
    ("markdown", "href"),
    [
        ("[me](tg://user?id=42)", "tg://user?id=42"),
        ("[mail](mailto:team@example.com)", "mailto:team@example.com"),
        ("<https://example.com>", "https://example.com"),
        ("![a cat](https://example.com/cat.png)", "https://example.com/cat.png"),
    ],
)
def test_allowed_schemes_become_links(markdown, href):
    assert f'<a href="{href}">' in to_telegram_html(markdown)


@pytest.mark.parametrize(
    "markdown",
    [
        "[x](/relative/path)",
        "[x](ftp://example.com/file)",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "![x](javascript:alert(1))",
        "[x](vbscript:msgbox)",
    ],
)
def test_other_links_become_plain_text(markdown):
    rendered = to_telegram_html(markdown)
    assert "<a" not in rendered
    assert "x" in visible_text(rendered)


def test_images_become_links_named_by_their_alt_text():
    assert to_telegram_html("![diagram](https://example.com/d.png)") == (
        '<a href="https://example.com/d.png">diagram</a>'
    )


def test_headings_become_bold_lines():
    assert to_telegram_html("# Title\n\nBody") == "<b>Title</b>\n\nBody"
    assert to_telegram_html("Setext\n======") == "<b>Setext</b>"


def test_bold_inside_a_heading_is_not_nested_in_bold():
    assert to_telegram_html("## The **plan**") == "<b>The plan</b>"


def test_lists_become_lines_with_bullets_and_numbers():
    assert to_telegram_html("- apples\n- pears\n  - green") == "• apples\n• pears\n  • green"
    assert to_telegram_html("3. third\n4. fourth") == "3. third\n4. fourth"


def test_tables_become_a_monospace_block():
    rendered = to_telegram_html("| name | qty |\n|:--|--:|\n| apple | 3 |\n| kiwi | 12 |")
    assert rendered == "<pre>name  | qty\n------+----\napple |   3\nkiwi  |  12</pre>"


def test_code_blocks_keep_their_language_and_escape_their_content():
    rendered = to_telegram_html("```python\nif a < b:\n    print('<b>')\n```")
    assert rendered == (
        "<pre><code class=\"language-python\">if a &lt; b:\n    print('&lt;b&gt;')</code></pre>"
    )


def test_an_unclosed_code_fence_is_closed():
    rendered = to_telegram_html("Here:\n\n```python\nfor i in range(3):\n    print(i)")
    assert rendered.endswith("    print(i)</code></pre>")
    assert_telegram_html(rendered)


def test_inline_code_is_taken_out_of_bold_because_telegram_forbids_that_nesting():
    assert to_telegram_html("**run `make` now**") == "<b>run </b><code>make</code><b> now</b>"


def test_blockquotes_are_not_nested():
    rendered = to_telegram_html("> outer\n> > inner\n\nafter")
    assert rendered == "<blockquote>outer\n\ninner</blockquote>\n\nafter"


def test_control_characters_and_lone_surrogates_do_not_reach_telegram():
    rendered = to_telegram_html("a\0b \ud800 c")
    assert "\0" not in rendered
    assert_telegram_html(rendered)
    assert plain_text_fallback("a\0b \ud800 c") == "a\ufffdb \ufffd c"


def test_a_reply_with_nothing_visible_once_rendered_is_sent_as_its_source():
    assert to_telegram_html("[ref]: https://example.com") == "[ref]: https://example.com"


def test_blank_input_renders_to_nothing():
    assert to_telegram_html("") == ""
    assert to_telegram_html(" \n\t\n") == ""


HOSTILE = [
    "<script>alert(1)</script>",
    "<b>unclosed",
    "</b> stray close </pre>",
    "**bold *nested* _",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    '[q](https://example.com/"onmouseover="alert(1))',
    "[a](https://a.example)[b](https://b.example)",
    "```python\nprint('<b>')\n",
    "```\nunclosed fence",
    "~~~\ntilde fence\n~~~",
    "````\n```\ninner fence\n```\n````",
    "| a | b |\n|---|---|\n| <i> | & |",
    "| broken | table\n|--|\n| x",
    "- a\n  - b\n    - c\n      - d\n        1. e",
    "> quote\n> > nested\n> > > deeper\n\n> ```\n> code in quote\n> ```",
    "&amp; &lt; &gt; &quot; &copy; &#169; &#x1F600; &bogus; & &#; &#xZZ;",
    "a\0b\0c",
    "lone \ud800 surrogate \udfff and pair \ud83d\ude00",
    "# **bold heading** with `code`",
    "***bold italic*** and ~~strike **bold**~~",
    "**`code in bold`** _`code in italic`_ ~~`code in strike`~~",
    "[`code in link`](https://example.com)",
    "[**bold link**](https://example.com)",
    "[![image in link](https://example.com/a.png)](https://example.com)",
    "<http://autolink.example> <mailto:a@b.example> <a@b.example>",
    "<!-- comment --> <?php ?> <!DOCTYPE html> <![CDATA[x]]>",
    '<a href="https://example.com">raw link</a> <tg-spoiler>x</tg-spoiler>',
    "[" * 500 + "]" * 500,
    "*" * 300 + "a" + "_" * 300,
    ">" * 80 + " deep quote",
    "- " * 60 + "deep list",
    "    indented code <b>",
    "trailing spaces  \nhard break\\\nbackslash break",
    "Setext\n=====\n\nAnother\n-----\n\n---\n***\n___",
    '[ref]\n\n[ref]: https://example.com/"quoted"',
    "\\*escaped\\* \\<b\\> \\[x\\](y)",
    "`` ` `` and ``` `` ```",
    "emoji 😀👨‍👩‍👧🇺🇦 and CJK 中文 and e\u0301",
    "[empty]() [](https://example.com) ![](https://example.com/x.png)",
    "**unclosed bold\n\n```js\nlet x = 1 < 2 && 3 > 2;",
    "1. one\n\n   ```bash\n   make <target>\n   ```\n2. two",
    "| `code` | **bold** | [link](https://example.com) |\n|--|--|--|\n| 中文 | 😀 | e\u0301 |",
]


@pytest.mark.parametrize("markdown", HOSTILE)
def test_hostile_and_broken_markdown_gives_html_telegram_accepts(markdown):
    rendered = to_telegram_html(markdown)
    assert_telegram_html(rendered)
    assert rendered.strip()


def test_nested_blocks_beyond_the_parser_depth_are_shown_as_text_not_dropped():
    markdown = "> " * 40 + "the deepest words"
    rendered = to_telegram_html(markdown)
    assert "the deepest words" in visible_text(rendered)
    assert_telegram_html(rendered)


def test_markup_too_costly_to_parse_is_shown_as_escaped_text():
    bomb = "[" * 100_000 + "<"
    assert to_telegram_html(bomb) == "[" * 100_000 + "&lt;"


# Splitting ----------------------------------------------------------------------------------


def long_python_reply() -> tuple[str, list[str]]:
    body = [
        f"    total += compute_step({i}, values[{i}])  # accumulate step {i}" for i in range(160)
    ]
    code = ["def run(values):", "    total = 0", *body, "    return total"]
    reply = (
        "Here is the function you asked for:\n\n```python\n"
        + "\n".join(code)
        + "\n```\n\nCall it with a list of numbers."
    )
    return reply, code


def test_a_long_code_reply_splits_with_the_fence_reopened_in_each_part():
    reply, code = long_python_reply()
    assert len(reply) >= 10_000
    parts = assert_split(reply)
    assert len(parts) >= 3
    assert parts[1].startswith("```python\n")
    for part in parts[:-1]:
        assert to_telegram_html(part).count('<pre><code class="language-python">') == 1
    assert [line for part in parts for line in code_lines(part)] == code


def test_a_reply_that_fits_is_one_part_unchanged():
    assert split_for_telegram("Just **one** line.") == ["Just **one** line."]


def test_blank_input_gives_no_parts():
    assert split_for_telegram("") == []
    assert split_for_telegram("  \n\n \t ") == []


def test_emoji_are_measured_in_utf16_units():
    assert assert_split("😀" * 2000) == ["😀" * 2000]
    assert utf16_len(to_telegram_html("😀" * 2000)) == 4000
    parts = assert_split("😀" * 2100)
    assert len(parts) == 2
    assert "".join(parts) == "😀" * 2100


def test_cjk_text_without_spaces_splits_by_characters():
    text = "中文字符" * 1500
    parts = assert_split(text)
    assert len(parts) == 2
    assert "".join(parts) == text


def test_a_single_line_longer_than_the_limit_without_spaces_splits():
    text = "x" * 10_000
    parts = assert_split(text)
    assert len(parts) == 3
    assert "".join(parts) == text


def test_characters_are_not_split_from_their_combining_marks_or_joiners():
    # The leading "x" puts the limit in the middle of a cluster.
    accented = "x" + "e\u0301" * 3000
    for part in assert_split(accented):
        assert part.removeprefix("x").startswith("e") and part.endswith("\u0301")
    family = "x" + "👨‍👩‍👧" * 800
    for part in assert_split(family):
        assert part.removeprefix("x").replace("👨‍👩‍👧", "") == ""
    flags = "x" + "🇺🇦🇯🇵" * 1100
    for part in assert_split(flags):
        assert re.fullmatch("(?:🇺🇦|🇯🇵)+", part.removeprefix("x"))


def test_paragraph_boundaries_are_preferred():
    paragraphs = [f"Paragraph {n}: " + "some words " * 90 for n in range(12)]
    parts = assert_split("\n\n".join(paragraphs))
    assert len(parts) > 1
    for part in parts:
        assert all(chunk.strip() in [p.strip() for p in paragraphs] for chunk in part.split("\n\n"))


def test_line_boundaries_come_next():
    lines = [f"line {n} " + "word " * 15 for n in range(120)]
    parts = assert_split("\n".join(lines))
    assert len(parts) > 1
    for part in parts:
        assert all(line.strip() in [x.strip() for x in lines] for line in part.split("\n"))


def test_spaces_come_after_lines():
    words = [f"word{n}" for n in range(2000)]
    parts = assert_split(" ".join(words))
    assert len(parts) > 1
    assert [word for part in parts for word in part.split(" ")] == words


def test_escaping_that_overflows_the_limit_is_accounted_for():
    parts = assert_split("a&b<c>" * 1200)
    assert len(parts) >= 5


def test_an_unclosed_fence_of_a_streaming_reply_is_closed_in_every_part():
    reply, code = long_python_reply()
    streaming = reply[: reply.index("    return total")]
    parts = assert_split(streaming)
    assert parts[-1].endswith("\n```")
    assert [line for part in parts for line in code_lines(part)] == code[:-1]


def test_fences_inside_list_items_and_quotes_are_reopened_the_same_way():
    steps = "1. Install:\n   ```bash\n" + "   apt-get install package\n" * 300 + "   ```\n2. Done"
    parts = assert_split(steps, 2000)
    assert parts[1].startswith("   ```bash\n")
    quoted = "> ```sql\n" + "> select * from users where id < 10;\n" * 200 + "> ```"
    parts = assert_split(quoted, 2000)
    assert parts[1].startswith("> ```sql\n")


def test_a_smaller_limit_is_respected_and_a_tiny_one_refused():
    reply, _code = long_python_reply()
    assert len(assert_split(reply, 1000)) >= 10
    with pytest.raises(ValueError):
        split_for_telegram(reply, 100)


def test_pathological_replies_still_split_within_the_limits():
    assert len(assert_split("[" * 200_000)) >= 49
    assert_split("![" * 20_000 + "&" * 20_000)
    assert_split("- a\n" * 5_000)
    assert_split("e" + "\u0301" * 10_000)
    assert assert_split(" " * 10_000 + "x") == ["x"]


def test_plain_text_fallback_is_the_markdown_part():
    for part in split_for_telegram(long_python_reply()[0]):
        assert plain_text_fallback(part) == part


WORDS = [
    "the",
    "agent",
    "replied",
    "quickly",
    "**bold**",
    "*italic*",
    "~~gone~~",
    "`code`",
    "[link](https://example.com/page)",
    "😀",
    "👨‍👩‍👧",
    "中文",
    "naïve",
    "e\u0301",
    "a<b",
    "&",
    "x>y",
    "<tag>",
    "_under_",
]


def random_words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def random_reply(rng: random.Random) -> str:
    blocks = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.randrange(9)
        if kind == 0:
            blocks.append(random_words(rng, rng.randint(1, 250)))
        elif kind == 1:
            blocks.append("#" * rng.randint(1, 3) + " " + random_words(rng, rng.randint(1, 8)))
        elif kind == 2:
            marker = rng.choice(["-", "*", "1."])
            items = [f"{marker} {random_words(rng, rng.randint(1, 20))}" for _ in range(9)]
            blocks.append("\n".join(items[: rng.randint(1, 9)]))
        elif kind == 3:
            language = rng.choice(["python", "js", ""])
            lines = [f"x_{n} = [{n}, '<{n}>'] && {'y' * rng.randint(0, 60)}" for n in range(60)]
            blocks.append(f"```{language}\n" + "\n".join(lines[: rng.randint(1, 60)]) + "\n```")
        elif kind == 4:
            rows = [f"| {random_words(rng, 2)} | {rng.randint(0, 999)} |" for _ in range(20)]
            blocks.append("| a | b |\n|---|--:|\n" + "\n".join(rows[: rng.randint(1, 20)]))
        elif kind == 5:
            blocks.append("\n".join("> " + random_words(rng, 12) for _ in range(rng.randint(1, 8))))
        elif kind == 6:
            blocks.append(rng.choice(["x", "😀", "中", "&"]) * rng.randint(50, 2000))
        elif kind == 7:
            blocks.append("\n".join(random_words(rng, 6) for _ in range(rng.randint(2, 40))))
        else:
            blocks.append("---")
    reply = rng.choice(["\n\n", "\n"]).join(blocks)
    if rng.random() < 0.2:
        reply += "\n\n```python\n" + "\n".join(f"print({n})" for n in range(rng.randint(0, 80)))
    return reply


def test_random_replies_keep_every_split_promise():
    rng = random.Random(20240611)
    for _case in range(300):
        reply = random_reply(rng)
        limit = rng.choice([256, 300, 512, 1000, 4096])
        assert_split(reply, limit)


# Streaming previews -------------------------------------------------------------------------


def test_a_short_streaming_reply_is_previewed_whole():
    assert streaming_preview("Thinking about **it**") == "Thinking about <b>it</b>"
    assert streaming_preview("") == ""


def test_a_long_streaming_reply_is_cut_with_an_ellipsis():
    reply, _code = long_python_reply()
    preview = streaming_preview(reply[:9000])
    assert utf16_len(preview) <= TELEGRAM_LIMIT
    assert preview.endswith("</code></pre>…")
    assert_telegram_html(preview[:-1])
    assert preview.startswith("Here is the function you asked for:")


def test_a_streaming_preview_of_a_huge_reply_shows_its_start():
    preview = streaming_preview("**word** " * 50_000)
    assert utf16_len(preview) <= TELEGRAM_LIMIT
    assert preview.startswith("<b>word</b> <b>word</b>") and preview.endswith("…")
    assert streaming_preview("word " * 100 + " " * 10_000) == "word " * 99 + "word"


def test_a_streaming_preview_closes_what_the_model_has_not_closed_yet():
    preview = streaming_preview('Sure:\n\n```python\nprint("**not bold**")\n**still')
    assert_telegram_html(preview)
    assert "<b>" not in preview


@pytest.mark.parametrize("limit", [256, 1000])
def test_streaming_previews_fit_any_limit(limit):
    rng = random.Random(limit)
    for _case in range(30):
        preview = streaming_preview(random_reply(rng), limit)
        assert utf16_len(preview) <= limit
        assert_telegram_html(preview.removesuffix("…"))
