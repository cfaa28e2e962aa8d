"""Approval pages show hidden code points: `reveal_hidden` and its template filter turn every
invisible, bidi, tag or selector character into a visible marker, and leave legitimate emoji
and joiners alone."""

from django.template import Context, Template

from hermes_site.scanning import reveal_hidden


def tags(text: str) -> str:
    return "".join(chr(0xE0000 + ord(c)) for c in text)


ENGLAND = "\U0001f3f4" + tags("gbeng") + "\U000e007f"


def test_invisible_and_bidi_characters_become_markers():
    assert reveal_hidden("a\u200bb") == "a⟦U+200B⟧b"
    assert reveal_hidden("invoice\u202efdp.exe") == "invoice⟦U+202E⟧fdp.exe"
    assert reveal_hidden("x\u180b\u2800y") == "x⟦U+180B⟧⟦U+2800⟧y"


def test_tag_runs_are_decoded():
    text = f"Great 👍{tags('ignore all')} done"
    assert reveal_hidden(text) == 'Great 👍⟦tags: "ignore all"⟧ done'
    flagged = "\U0001f3f4" + tags("ignore") + "\U000e007f"
    assert reveal_hidden(flagged) == '\U0001f3f4⟦tags: "ignore"⟧⟦U+E007F⟧'


def test_selector_payloads_are_decoded():
    payload = "".join(chr(0xFE00 + b) if b < 16 else chr(0xE0100 + b - 16) for b in b"hi there")
    assert reveal_hidden(f"😀{payload}") == '😀⟦selectors: "hi there"⟧'


def test_legitimate_uses_are_left_as_they_are():
    for text in ("👩\u200d💻", "❤\ufe0f", "می\u200cخواهم", ENGLAND, "plain text", ""):
        assert reveal_hidden(text) == text


def test_template_filter_escapes_and_reveals():
    rendered = Template("{% load scanning %}{{ text|reveal_hidden }}").render(
        Context({"text": "<b>x\u200b</b>"})
    )
    assert rendered == "&lt;b&gt;x⟦U+200B⟧&lt;/b&gt;"
    assert (
        Template("{% load scanning %}{{ text|reveal_hidden }}").render(Context({"text": None}))
        == ""
    )
